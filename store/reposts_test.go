package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// afterStatement runs then once, right after the first statement whose
// SQL contains marker has finished (and committed: each runs on its own).
type afterStatement struct {
	marker string
	once   sync.Once
	then   func()
}

// TestCreateRepostRacingDeletes: CreateRepost answers what it did when a
// delete commits between its statements. Each case runs the delete right
// after the statement that inserts the repost (or finds one there), on
// another connection.
func TestCreateRepostRacingDeletes(t *testing.T) {
	t.Parallel()
	const author, reposter = 1, 2

	// setupHooked returns a store whose statements containing marker run
	// then (once) when they finish, and a store without the hook.
	setupHooked := func(t *testing.T) (hooked, plain *store.DB, hook *afterStatement) {
		t.Helper()
		url := testenv.NewDatabaseURL(t)
		plain = store.New(testenv.Pool(t, url), nil)
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		hook = &afterStatement{}
		cfg.ConnConfig.Tracer = tracerFunc{hook: hook}
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return store.New(pool, nil), plain, hook
	}

	t.Run("OriginalDeletedRightAfterTheRepost", func(t *testing.T) {
		// The repost committed, then the original's delete took it along:
		// the repost was made (its event too), and the answer says so.
		t.Parallel()
		db, plain, hook := setupHooked(t)
		ctx := t.Context()
		original, _, err := plain.CreatePost(ctx, author, "original", "")
		require.NoError(t, err)
		var deleted []int64
		hook.marker, hook.then = "INSERT INTO posts (author_id, body, repost_of)", func() {
			deleted, err = plain.DeletePostAndReposts(context.Background(), original.ID, author)
			require.NoError(t, err)
		}
		repost, created, err := db.CreateRepost(ctx, reposter, original.ID)
		require.NoError(t, err, "the repost was made before the delete")
		require.True(t, created)
		require.Equal(t, []int64{repost.ID}, deleted, "the delete took the repost along")
		require.Equal(t, int64(reposter), repost.AuthorID)
		require.NotNil(t, repost.RepostOf)
		require.Equal(t, original.ID, repost.RepostOf.ID)
		require.Equal(t, int64(author), repost.RepostOf.AuthorID)
		require.Equal(t, "original", repost.RepostOf.Body)
	})

	t.Run("FirstRepostDeletedRightAfterTheRepeat", func(t *testing.T) {
		// A repeat found the first repost in its way, which its author
		// deleted right then: the original is there and not reposted, so
		// this makes a new repost; it is not "not found".
		t.Parallel()
		db, plain, hook := setupHooked(t)
		ctx := t.Context()
		original, _, err := plain.CreatePost(ctx, author, "original", "")
		require.NoError(t, err)
		first, created, err := plain.CreateRepost(ctx, reposter, original.ID)
		require.NoError(t, err)
		require.True(t, created)
		hook.marker, hook.then = "INSERT INTO posts (author_id, body, repost_of)", func() {
			require.NoError(t, plain.DeletePost(context.Background(), first.ID, reposter))
		}
		again, created, err := db.CreateRepost(ctx, reposter, original.ID)
		require.NoError(t, err)
		require.True(t, created, "a new repost: the first is deleted")
		require.Greater(t, again.ID, first.ID)
		require.Equal(t, original.ID, again.RepostOf.ID)
	})
}

// tracerFunc is a pgx tracer that calls its hook.
type tracerFunc struct{ hook *afterStatement }

func (f tracerFunc) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, data.SQL)
}

func (f tracerFunc) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(sqlKey{}).(string); f.hook.marker != "" && data.Err == nil && strings.Contains(sql, f.hook.marker) {
		f.hook.once.Do(f.hook.then)
	}
}

type sqlKey struct{}
