package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// traced returns a context holding a sampled span, and its traceparent.
func traced(t *testing.T, name string) (context.Context, string) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), name)
	t.Cleanup(func() { span.End() })
	return ctx, traceparent.From(ctx)
}

// TestOutboxKeepsTheTraceContext: every write that records an event keeps
// the trace context of the span that made it, the claim returns it, and a
// split's chunks keep the splitting span's (or else their parent's).
func TestOutboxKeepsTheTraceContext(t *testing.T) {
	t.Parallel()

	t.Run("EveryEventOfARequest", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx, want := traced(t, "request")
		p, _, err := db.CreatePost(ctx, 3, "traced", "")
		require.NoError(t, err)
		require.NoError(t, db.DeletePost(ctx, p.ID, 3))
		_, err = db.Follow(ctx, 4, 3)
		require.NoError(t, err)
		_, err = db.Unfollow(ctx, 4, 3)
		require.NoError(t, err)
		events := requireClaim(t, db, 1, 2, 3, 4)
		types := map[string]bool{}
		for _, e := range events {
			require.Equal(t, want, e.TraceContext, "%s", e.Type)
			types[e.Type] = true
		}
		require.Len(t, types, 4)
	})

	t.Run("NoneWithoutASpan", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		_, _, err := db.CreatePost(t.Context(), 3, "untraced", "")
		require.NoError(t, err)
		events := requireClaim(t, db, 1)
		require.Empty(t, events[0].TraceContext)
		var stored *string
		require.NoError(t, bundle.pool.QueryRow(t.Context(), "SELECT trace_context FROM outbox").Scan(&stored))
		require.Nil(t, stored, "NULL, not an empty string")
	})

	// split creates a traced post, claims it and splits it in splitCtx;
	// it returns the post's stored context and the chunks' claimed events.
	split := func(t *testing.T, splitCtx func(t *testing.T) context.Context) (string, []domain.Event) {
		t.Helper()
		db, _ := setup(t)
		created, parentContext := traced(t, "create")
		p, _, err := db.CreatePost(created, 3, "to many", "")
		require.NoError(t, err)
		requireClaim(t, db, 1)
		_, err = db.SplitFanout(splitCtx(t), 1, chunksOf(domain.PostPayload{PostID: p.ID, AuthorID: 3}, 10))
		require.NoError(t, err)
		return parentContext, requireClaim(t, db, 2, 3)
	}

	t.Run("ChunksTakeTheSplittingSpan", func(t *testing.T) {
		t.Parallel()
		var splitContext string
		parentContext, chunks := split(t, func(t *testing.T) context.Context {
			var ctx context.Context
			ctx, splitContext = traced(t, "fan-out")
			return ctx
		})
		for _, c := range chunks {
			require.Equal(t, splitContext, c.TraceContext)
			require.NotEqual(t, parentContext, c.TraceContext)
		}
	})

	t.Run("ChunksKeepTheParentsWhenTheSplitIsNotTraced", func(t *testing.T) {
		t.Parallel()
		parentContext, chunks := split(t, func(t *testing.T) context.Context { return t.Context() })
		for _, c := range chunks {
			require.Equal(t, parentContext, c.TraceContext)
		}
	})
}
