package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
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
		// The original's delete begins once the repost is written: it
		// waits for the repost's commit (the original is held FOR SHARE)
		// and takes it along. The repost was made (its event too), and
		// the answer says so.
		t.Parallel()
		db, plain, hook := setupHooked(t)
		ctx := t.Context()
		original, _, err := plain.CreatePost(ctx, author, "original", "")
		require.NoError(t, err)
		type deletion struct {
			reposts []int64
			err     error
		}
		deleted := make(chan deletion, 1)
		hook.marker, hook.then = "INSERT INTO posts (author_id, body, repost_of)", func() {
			go func() {
				reposts, err := plain.DeletePostAndReposts(context.Background(), original.ID, author)
				deleted <- deletion{reposts, err}
			}()
		}
		repost, created, err := db.CreateRepost(ctx, reposter, original.ID)
		require.NoError(t, err, "the repost was made before the delete")
		require.True(t, created)
		d := <-deleted
		require.NoError(t, d.err)
		require.Equal(t, []int64{repost.ID}, d.reposts, "the delete took the repost along")
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

// TestCreateRepostWaitsForAMuteInFlight: a mute of the original's author
// that has begun (it took the next version of the reposter's graph) and
// not committed makes the repost wait, and then refuse: no repost commits
// after a mute it did not see.
func TestCreateRepostWaitsForAMuteInFlight(t *testing.T) {
	t.Parallel()
	const author, reposter = 1, 2
	url := testenv.NewDatabaseURL(t)
	pool := testenv.Pool(t, url)
	db := store.New(pool, nil)
	ctx := t.Context()
	original, _, err := db.CreatePost(ctx, author, "original", "")
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO graph_versions (user_id, version) VALUES ($1, 1)
ON CONFLICT (user_id) DO UPDATE SET version = graph_versions.version + 1`, reposter)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO mutes (user_id, muted_id) VALUES ($1, $2)`, reposter, author)
	require.NoError(t, err)

	type result struct {
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		_, created, err := db.CreateRepost(context.Background(), reposter, original.ID)
		done <- result{created, err}
	}()
	// It waits on the mute's lock (else it answers: a failure below).
	for waiting := 0; waiting == 0; {
		select {
		case r := <-done:
			t.Fatalf("the repost answered (created %v, %v) while the mute was in flight", r.created, r.err)
		default:
		}
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
	}
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.ErrorIs(t, r.err, domain.ErrNotFound, "the mute committed first")
}

// TestRepostOfARepostRacingTheOriginalsDelete: the delete of an original
// locks it, then its reposts; a repost of one of those reposts must lock
// them in the same order, or the two wait for each other (PostgreSQL
// breaks the deadlock by failing one: a 503). Another transaction holding
// the repost FOR SHARE (someone else reposting it) lines the two up.
func TestRepostOfARepostRacingTheOriginalsDelete(t *testing.T) {
	t.Parallel()
	const author, reposter, other = 1, 2, 3
	pool := testenv.Pool(t, testenv.NewDatabaseURL(t))
	db := store.New(pool, nil)
	ctx := t.Context()
	original, _, err := db.CreatePost(ctx, author, "original", "")
	require.NoError(t, err)
	repost, _, err := db.CreateRepost(ctx, reposter, original.ID)
	require.NoError(t, err)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT id FROM posts WHERE id = $1 FOR SHARE`, repost.ID)
	require.NoError(t, err)
	waiting := func(n int) {
		t.Helper()
		for got := 0; got < n; {
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got))
		}
	}

	type deletion struct {
		reposts []int64
		err     error
	}
	deleted := make(chan deletion, 1)
	go func() {
		reposts, err := db.DeletePostAndReposts(context.Background(), original.ID, author)
		deleted <- deletion{reposts, err}
	}()
	waiting(1) // the delete holds the original and waits for the repost
	reposted := make(chan error, 1)
	go func() {
		_, _, err := db.CreateRepost(context.Background(), other, repost.ID)
		reposted <- err
	}()
	waiting(2)
	require.NoError(t, holder.Commit(ctx))
	d := <-deleted
	require.NoError(t, d.err)
	require.Equal(t, []int64{repost.ID}, d.reposts)
	require.ErrorIs(t, <-reposted, domain.ErrNotFound, "the delete came first; no deadlock")
}
