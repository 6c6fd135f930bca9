package api_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/sticky"
	"github.com/newsfeed/newsfeed/store"
)

// replicaBundle serves the API over a primary and a read pool, with the
// write positions in positionsRedis (nil: the feeds' Redis), as app wires
// database.read_url. checkWait bounds each look at a write position and at
// the replica (0: the product's 250 ms).
func replicaBundle(t *testing.T, primary, read *pgxpool.Pool, positionsRedis redis.UniversalClient, checkWait time.Duration) (*testBundle, *prometheus.Registry) {
	t.Helper()
	db := store.New(primary, read)
	rdb, prefix := testenv.NewRedis(t)
	if positionsRedis == nil {
		positionsRedis = rdb
	}
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
	reg := prometheus.NewRegistry()
	rw := &api.ReadYourWrites{
		Positions:   sticky.New(positionsRedis, prefix),
		Replication: db,
		Primary:     store.New(primary, nil),
	}
	if checkWait > 0 {
		api.SetCheckWait(rw, checkWait)
	}
	srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{
		Secret:         testSecret,
		ReadYourWrites: rw,
		Registerer:     reg,
	}))
	t.Cleanup(srv.Close)
	return &testBundle{pool: primary, db: db, rdb: rdb, prefix: prefix, feeds: feeds, srv: srv, secret: testSecret}, reg
}

// TestReadYourWrites gives the API a read pool on another, empty database: a
// replica that never replays anything. A caller's listings show their own
// writes at once (read on the primary); everybody else's listings are the
// replica's, stale. The checks get time enough that each answers, however
// busy the machine: the test counts the listings sent to the primary
// because the replica lags, and a check that timed out would count as
// "unchecked" instead (TestReadYourWritesWithRedisDown).
func TestReadYourWrites(t *testing.T) {
	t.Parallel()
	primary, never := testenv.NewPool(t), testenv.NewPool(t)
	b, reg := replicaBundle(t, primary, never, nil, time.Minute)
	const alice, bob, carol = 1, 2, 3

	b.follow(t, alice, bob)
	p := b.createPost(t, alice, "mine")
	gone := b.createPost(t, alice, "deleted")
	require.Equal(t, http.StatusNoContent, b.del(t, alice, postPath(gone.ID)).status)

	t.Run("TheWriterSeesTheirWrites", func(t *testing.T) {
		require.Equal(t, []int64{bob}, followIDs(page[apiFollow](t, b, alice, followingPath(alice)).Items))
		require.Equal(t, []int64{alice}, followIDs(page[apiFollow](t, b, alice, followersPath(bob)).Items),
			"their follow in someone else's listing too")
		require.Equal(t, []int64{p.ID}, postIDs(page[apiPost](t, b, alice, "/v1/users/1/posts").Items))
		require.Equal(t, http.StatusOK, b.get(t, alice, postPath(p.ID)).status, "a post by id reads the primary")
		require.Equal(t, 3.0, counterValue(t, reg, "newsfeed_read_primary_fallback_total", "lagging"))
	})

	t.Run("OthersSeeTheReplica", func(t *testing.T) {
		require.Empty(t, page[apiFollow](t, b, carol, followingPath(alice)).Items)
		require.Empty(t, page[apiFollow](t, b, carol, followersPath(bob)).Items)
		require.Empty(t, page[apiPost](t, b, carol, "/v1/users/1/posts").Items)
		require.Equal(t, 3.0, counterValue(t, reg, "newsfeed_read_primary_fallback_total", "lagging"),
			"a user who wrote nothing is not checked")
	})

	t.Run("EveryWriteRecords", func(t *testing.T) {
		// An idempotent repeat, a follow of a followee, an unfollow: each
		// may stand for a first request that committed and died before it
		// recorded.
		user := int64(1000)
		for _, write := range []func(as int64){
			func(as int64) {
				res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"k"}`), as: as,
					header: map[string]string{"Idempotency-Key": "k"}})
				require.Contains(t, []int{http.StatusCreated, http.StatusOK}, res.status)
			},
			func(as int64) { b.follow(t, as, bob) },
			func(as int64) { b.unfollow(t, as, bob) },
			func(as int64) {
				require.Equal(t, http.StatusNoContent, b.del(t, as, postPath(b.createPost(t, as, "x").ID)).status)
			},
		} {
			user++
			write(user)
			require.NoError(t, b.rdb.Del(t.Context(), sticky.Key(b.prefix, user)).Err())
			write(user) // the repeat alone
			_, found, err := sticky.New(b.rdb, b.prefix).Get(t.Context(), user)
			require.NoError(t, err)
			require.True(t, found)
		}
	})
}

// When the write positions cannot be read — Redis refuses, or accepts and
// never answers — a listing reads the primary, soon, and writes still
// succeed.
func TestReadYourWritesWithRedisDown(t *testing.T) {
	t.Parallel()
	silent := silentRedis(t)
	for name, rdb := range map[string]redis.UniversalClient{
		"Refused": redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second}),
		// As app configures it: context deadlines bound the socket reads.
		"Silent": redis.NewClient(&redis.Options{Addr: silent, MaxRetries: -1, ContextTimeoutEnabled: true}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() { _ = rdb.Close() })
			b, reg := replicaBundle(t, testenv.NewPool(t), testenv.NewPool(t), rdb, 0)
			const alice, bob, carol = 1, 2, 3

			start := time.Now()
			b.follow(t, alice, bob)
			require.Equal(t, []int64{bob}, followIDs(page[apiFollow](t, b, alice, followingPath(alice)).Items))
			require.Equal(t, []int64{bob}, followIDs(page[apiFollow](t, b, carol, followingPath(alice)).Items),
				"nobody's reads can be checked: everybody reads the primary")
			require.Less(t, time.Since(start), 5*time.Second, "each look at Redis gives up after a fraction of a second")
			require.Equal(t, 2.0, counterValue(t, reg, "newsfeed_read_primary_fallback_total", "unchecked"))
			require.Equal(t, 1.0, testutilCounter(t, reg, "newsfeed_write_position_failures_total"))
		})
	}
}

// silentRedis listens, accepts and never answers.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return ln.Addr().String()
}

// testutilCounter reads an unlabelled counter.
func testutilCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// On the real replica (NEWSFEED_TEST_REPLICA_URL): a caller's listings read
// the primary while the replica lags behind their write, and the replica
// once it has replayed it.
func TestReadYourWritesOnTheReplica(t *testing.T) {
	t.Parallel()
	testenv.SkipWithoutReplica(t)
	url := testenv.NewDatabaseURL(t)
	b, reg := replicaBundle(t, testenv.Pool(t, url), testenv.Pool(t, testenv.ReplicaDatabaseURL(t, url)), nil, time.Minute)
	const alice, bob = 1, 2

	b.follow(t, alice, bob)
	require.Equal(t, []int64{bob}, followIDs(page[apiFollow](t, b, alice, followingPath(alice)).Items))
	lagging := counterValue(t, reg, "newsfeed_read_primary_fallback_total", "lagging")
	if testenv.ReplicaApplyDelay(t) >= time.Second {
		require.Equal(t, 1.0, lagging, "read on the primary: the replica lags a second or more")
	}

	lsn, _, err := sticky.New(b.rdb, b.prefix).Get(t.Context(), alice)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		ok, err := b.db.Replayed(ctx, lsn)
		require.NoError(t, err)
		if ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, []int64{bob}, followIDs(page[apiFollow](t, b, alice, followingPath(alice)).Items))
	require.Equal(t, lagging, counterValue(t, reg, "newsfeed_read_primary_fallback_total", "lagging"),
		"read on the replica, which has the write now")
}
