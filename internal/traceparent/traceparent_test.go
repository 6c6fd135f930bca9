package traceparent_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/newsfeed/newsfeed/internal/traceparent"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "create")
	defer span.End()

	value := traceparent.From(ctx)
	sc := span.SpanContext()
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", value)

	// Another process: the span it starts from the value is the child.
	remote := trace.SpanContextFromContext(traceparent.Into(context.Background(), value))
	require.True(t, remote.IsRemote())
	require.Equal(t, sc.TraceID(), remote.TraceID())
	require.Equal(t, sc.SpanID(), remote.SpanID())
	require.True(t, remote.IsSampled())
}

func TestNothingToCarry(t *testing.T) {
	t.Parallel()
	require.Empty(t, traceparent.From(context.Background()), "no span: nothing stored")
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01", "00-abc-def-01"} {
		ctx := traceparent.Into(context.Background(), bad)
		require.False(t, trace.SpanContextFromContext(ctx).IsValid(), "%q", bad)
	}
}

// TestPassedOnWithoutTracing: a process whose tracing is off (the no-op
// provider) passes on the context it received.
func TestPassedOnWithoutTracing(t *testing.T) {
	t.Parallel()
	const value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx, span := noop.NewTracerProvider().Tracer("off").Start(traceparent.Into(context.Background(), value), "publish")
	defer span.End()
	require.Equal(t, value, traceparent.From(ctx))
}
