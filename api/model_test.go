package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

// TestFeedModel is the model-based test of the home feed. Random sequences
// of posts (single and in bursts), reposts (of posts and of reposts, again
// and of one's own, behind blocks), deletes of posts and reposts, follows,
// unfollows, mutes, unmutes, blocks, unblocks, paged reads with cursors
// kept across writes, lost feeds (one key, or the whole Redis database),
// redelivered tickets and stale fan-outs run against the real API, outbox,
// dispatcher, queue, worker, PostgreSQL and Redis, with small feed.max_len
// (and some with trim slack), feed.backfill, fanout.chunk_size and
// fanout.celebrity_threshold; every request's status is the one the
// contract gives in the model's state. Steps build the cases that matter
// on purpose too: a reader who follows an author and two reposters of one
// post, and the entry that shows an original going (deleted, unfollowed,
// muted, blocked either way). After every step each user's whole feed,
// paged through the API, must equal the truth computed from the model's
// record alone (homeFeed: docs/API.md, "What a home feed holds").
//
// Every seed is a subtest of its own, run with rapid (which shrinks a
// failing sequence and prints it with the seed). Reproduce a failure with
// `go test ./api -run TestFeedModel -rapid.seed=N`; run longer with
// NEWSFEED_MODEL_CHECKS (checks per seed, default 20; 3 under -race,
// which `make test` follows with a full run without it).
func TestFeedModel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("model-based test: not in -short")
	}
	checks := 20 // a step costs about twice what it did before reposts, mutes and blocks
	if raceDetector {
		checks = 3
	}
	if v, err := strconv.Atoi(os.Getenv("NEWSFEED_MODEL_CHECKS")); err == nil && v > 0 {
		checks = v
	}
	seeds := []uint64{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()}
	if given := flag.Lookup("rapid.seed").Value.String(); given != "0" {
		seed, _ := strconv.ParseUint(given, 10, 64)
		seeds = []uint64{seed}
	}
	mustSet := func(name, value string) {
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	mustSet("rapid.checks", strconv.Itoa(checks))
	mustSet("rapid.steps", "25")
	mustSet("rapid.nofailfile", "true")
	var steps atomic.Int64
	t.Cleanup(func() { t.Logf("%d steps over %d seeds", steps.Load(), len(seeds)) })
	// rapid reads its seed from a flag when a check begins: the seeds take
	// turns setting it, and run side by side from their first step on.
	var starting sync.Mutex
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			env := newModelEnv(t)
			starting.Lock()
			var started sync.Once
			mustSet("rapid.seed", strconv.FormatUint(seed, 10))
			rapid.Check(t, func(rt *rapid.T) {
				started.Do(starting.Unlock)
				m := env.newModel(rt)
				rt.Repeat(m.actions(&steps))
			})
			started.Do(starting.Unlock) // a check that failed before its first step
		})
	}
}

// modelEnv is what the checks of one seed share: a database of their own and
// a Redis client. Each check (a rapid test case) gets users and a Redis
// prefix of its own, so checks never see each other's state.
type modelEnv struct {
	pool    *pgxpool.Pool
	db      *store.DB
	rdb     redis.UniversalClient
	cluster bool // rdb is a Redis Cluster (NEWSFEED_TEST_REDIS_CLUSTER_URL)
	prefix  string
	checks  atomic.Int64
}

func newModelEnv(t *testing.T) *modelEnv {
	pool := testenv.NewPool(t)
	rdb, prefix, cluster := testenv.NewUniversalRedis(t)
	return &modelEnv{pool: pool, db: store.New(pool, nil), rdb: rdb, prefix: prefix, cluster: cluster}
}

// modelConfig is one check's configuration, drawn by rapid.
type modelConfig struct {
	MaxLen, Backfill, ChunkSize, PageSize  int
	CelebrityThreshold, FollowingThreshold int64
}

// savedRead is a read that stopped after its first page: its cursor is kept
// across later writes and continued by a later step.
type savedRead struct {
	cursor string
	last   int64 // the id of the first page's last item
	limit  int
}

type model struct {
	*pipeline
	cfg   modelConfig
	users []int64

	rel relationSet // follows, mutes and blocks: [user, other]
	// pagesAt holds, per [follower, followee], a PostgreSQL write position
	// read while the follow held: a fan-out that read its page of followers
	// after it found the follower there.
	pagesAt map[[2]int64]int64
	posts   []truthPost // posts and reposts, ascending ids
	reads   map[int64]savedRead
}

// pipeline is the whole product in one process, on the real servers: the
// API, the outbox dispatcher (run by deliver), the queue and a worker, with
// feeds under a Redis prefix of their own.
type pipeline struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	prefix string
	e      *echo.Echo
	db     *store.DB
	feeds  *feed.Feeds
	queue  *queue.Queue
	disp   *outbox.Dispatcher
	// firstEvent: outbox rows above it are this pipeline's.
	firstEvent int64
	tokens     map[int64]string
}

// tb is what both *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// quickQueue is the real queue with a short blocking read, so that a worker
// stops within milliseconds when its check ends.
type quickQueue struct{ *queue.Queue }

func (q quickQueue) Read(ctx context.Context, consumer string, count int, _ time.Duration) ([]domain.Delivery, error) {
	return q.Queue.Read(ctx, consumer, count, 5*time.Millisecond)
}

func (env *modelEnv) newModel(t *rapid.T) *model {
	cfg := modelConfig{
		// Up to 8 every trim removes what is over max_len; from 32 on,
		// feeds sit in the trim slack (max_len/16) between trims.
		MaxLen:             rapid.SampledFrom([]int{3, 4, 8, 32, 40}).Draw(t, "max_len"),
		Backfill:           rapid.SampledFrom([]int{0, 1, 2, 50}).Draw(t, "backfill"),
		ChunkSize:          rapid.SampledFrom([]int{1, 2, 1000}).Draw(t, "chunk_size"),
		PageSize:           rapid.SampledFrom([]int{1, 2, 1000}).Draw(t, "page_size"),
		CelebrityThreshold: rapid.SampledFrom([]int64{0, 0, 1, 2}).Draw(t, "celebrity_threshold"),
		// Of 4 users, one follows at most 3: 1 and 2 make readers cross
		// fanout.following_threshold both ways.
		FollowingThreshold: rapid.SampledFrom([]int64{0, 0, 1, 2}).Draw(t, "following_threshold"),
	}
	n := env.checks.Add(1)
	m := &model{
		pipeline: startPipeline(t, env.pool, env.rdb, env.cluster, env.prefix+"m"+strconv.FormatInt(n, 10)+":", cfg),
		cfg:      cfg,
		rel:      newRelationSet(),
		pagesAt:  map[[2]int64]int64{},
		reads:    map[int64]savedRead{},
	}
	for i := range int64(4) {
		m.users = append(m.users, n*100+i+1)
	}
	t.Logf("config %+v, users %v", cfg, m.users)
	return m
}

// startPipeline builds the product on pool and rdb, with every Redis key
// under prefix, and starts its worker until the test ends.
func startPipeline(t tb, pool *pgxpool.Pool, rdb redis.UniversalClient, cluster bool, prefix string, cfg modelConfig) *pipeline {
	t.Helper()
	return startPipelineCtx(context.Background(), t, pool, rdb, cluster, prefix, cfg)
}

// startPipelineCtx is startPipeline with the worker running under ctx (one
// that carries failpoints, say).
func startPipelineCtx(ctx context.Context, t tb, pool *pgxpool.Pool, rdb redis.UniversalClient, cluster bool, prefix string, cfg modelConfig) *pipeline {
	t.Helper()
	db := store.New(pool, nil)
	p := &pipeline{pool: pool, db: db, rdb: rdb, prefix: prefix, tokens: map[int64]string{}}
	if err := pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM outbox`).Scan(&p.firstEvent); err != nil {
		t.Fatalf("%v", err)
	}
	p.feeds = newFeeds(t, rdb, db, feed.Config{
		Prefix:             prefix,
		MaxLen:             cfg.MaxLen,
		Backfill:           cfg.Backfill,
		CelebrityThreshold: cfg.CelebrityThreshold,
		FollowingThreshold: cfg.FollowingThreshold,
		Cluster:            cluster,
	})
	p.queue = queue.New(rdb, prefix+"tickets", "fanout")
	if err := p.queue.EnsureGroup(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	disp, err := outbox.NewDispatcher(db, p.queue, outbox.Config{RedeliverAfter: time.Hour})
	if err != nil {
		t.Fatalf("%v", err)
	}
	p.disp = disp
	p.e = newAPI(t, db, db, p.feeds, api.Config{Secret: testSecret})
	wlog := zap.NewNop()
	if os.Getenv("NEWSFEED_MODEL_DUMP") != "" {
		wlog = zap.NewExample()
	}
	w, err := fanout.New(db, p.feeds, db, quickQueue{p.queue}, fanout.Config{
		Logger:          wlog,
		Concurrency:     4,
		PageSize:        cfg.PageSize,
		ChunkSize:       cfg.ChunkSize,
		ClaimIdle:       time.Minute,
		ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Run(wctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	return p
}

func (m *model) actions(steps *atomic.Int64) map[string]func(*rapid.T) {
	// A step that skips (nothing to delete, say) is not counted.
	step := func(f func(*rapid.T)) func(*rapid.T) {
		return func(t *rapid.T) { f(t); steps.Add(1) }
	}
	return map[string]func(*rapid.T){
		"post": step(func(t *rapid.T) {
			m.post(t, m.user(t, "author"))
			m.deliver(t)
		}),
		"burst": step(func(t *rapid.T) {
			author := m.user(t, "author")
			// A few posts, or enough to fill a feed past max_len and its slack.
			n := rapid.OneOf(rapid.IntRange(2, 8), rapid.IntRange(30, 45)).Draw(t, "posts")
			for range n {
				m.post(t, author)
			}
			m.deliver(t) // fan-outs run concurrently, finishing in any order
		}),
		"delete": step(func(t *rapid.T) {
			live := m.livePosts()
			if len(live) == 0 {
				t.Skip("no post to delete")
			}
			m.delete(t, rapid.SampledFrom(live).Draw(t, "post"))
			m.deliver(t)
		}),
		"follow": step(func(t *rapid.T) {
			a, b := m.pair(t)
			m.follow(t, a, b)
			m.deliver(t)
		}),
		"unfollow": step(func(t *rapid.T) {
			a, b := m.pair(t)
			m.unfollow(t, a, b)
			m.deliver(t)
		}),
		"repost": step(func(t *rapid.T) {
			// Any post or repost, deleted or not, one's own or not: the
			// status tells which.
			if len(m.posts) == 0 {
				t.Skip("no post to repost")
			}
			m.repost(t, m.user(t, "reposter"), rapid.SampledFrom(m.posts).Draw(t, "post"))
			m.deliver(t)
		}),
		"reposted twice": step(func(t *rapid.T) {
			// A reader follows an author and two reposters of one of the
			// author's posts: the post shows once. (A block in the way
			// refuses a follow or a repost; the model says which.)
			roles := rapid.Permutation(m.users).Draw(t, "reader, author, reposters")
			reader, author := roles[0], roles[1]
			for _, u := range roles[1:] {
				m.follow(t, reader, u)
			}
			p := m.post(t, author)
			for _, u := range roles[2:] {
				m.repost(t, u, p)
			}
			m.deliver(t)
		}),
		"shown goes": step(func(t *rapid.T) {
			// The entry that shows an original leaves the feed: deleted,
			// unfollowed, muted, blocked (either way). The next shows.
			reader := m.user(t, "reader")
			shown := m.truth(reader, 0)
			if len(shown) == 0 {
				t.Skip("nothing shows")
			}
			if next := m.contested(reader, shown); len(next) > 0 && rapid.IntRange(0, 3).Draw(t, "contested") > 0 {
				shown = next
			}
			p := m.find(rapid.SampledFrom(shown).Draw(t, "shown"))
			how := "delete"
			if p.author != reader {
				how = rapid.SampledFrom([]string{"delete", "unfollow", "mute", "block", "blocked by"}).Draw(t, "how")
			}
			switch how {
			case "delete":
				m.delete(t, p)
			case "unfollow":
				m.unfollow(t, reader, p.author)
			case "mute":
				m.mute(t, reader, p.author, true)
			case "block":
				m.block(t, reader, p.author, true)
			case "blocked by":
				m.block(t, p.author, reader, true)
			}
			m.deliver(t)
		}),
		"mute": step(func(t *rapid.T) {
			a, b := m.pair(t)
			m.mute(t, a, b, rapid.IntRange(0, 2).Draw(t, "mute or unmute") > 0)
			m.deliver(t)
		}),
		"block": step(func(t *rapid.T) {
			a, b := m.pair(t)
			m.block(t, a, b, rapid.IntRange(0, 2).Draw(t, "block or unblock") > 0)
			m.deliver(t)
		}),
		"start read": step(func(t *rapid.T) {
			reader := m.user(t, "reader")
			limit := rapid.IntRange(1, 6).Draw(t, "limit")
			items, next := m.page(t, reader, limit, "")
			if want := m.truth(reader, 0); len(want) > 0 && len(items) > 0 && next != nil {
				m.reads[reader] = savedRead{cursor: *next, last: items[len(items)-1], limit: limit}
			}
		}),
		"continue read": step(func(t *rapid.T) {
			reader := m.user(t, "reader")
			r, ok := m.reads[reader]
			if !ok {
				t.Skip("no read to continue")
			}
			delete(m.reads, reader)
			got := m.readFrom(t, reader, r.limit, r.cursor, math.MaxInt)
			if want := m.truth(reader, r.last); !slices.Equal(got, want) {
				t.Fatalf("user %d: the pages after a cursor kept across writes hold %v, want %v (the posts below %d): %s",
					reader, got, want, r.last, m.diff(reader, got, want))
			}
		}),
		"lose feed": step(func(t *rapid.T) {
			u := m.user(t, "user")
			if err := m.rdb.Del(context.Background(), feed.Key(m.prefix, u)).Err(); err != nil {
				t.Fatal(err)
			}
		}),
		"operator rebuild": step(func(t *rapid.T) {
			// `newsfeed feed rebuild`: the feed is the truth at once, its
			// newest max_len posts in Redis.
			u := m.user(t, "user")
			stored, err := m.feeds.Rebuild(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			// A reader who follows many keeps no feed: Redis holds none
			// (reads, checked after every step, come from PostgreSQL).
			followees := int64(0)
			for _, other := range m.users {
				if m.rel.follows(u, other) {
					followees++
				}
			}
			if many := m.cfg.FollowingThreshold > 0 && followees > m.cfg.FollowingThreshold; stored.FollowsMany || many {
				if !stored.FollowsMany || !many {
					t.Fatalf("user %d follows %d: the rebuild says pulled %v", u, followees, stored.FollowsMany)
				}
				if left, err := feed.Inspect(context.Background(), m.rdb, m.prefix, u); err != nil || left.Exists {
					t.Fatalf("user %d follows %d: Redis still holds a feed (%v)", u, followees, err)
				}
				return
			}
			// It holds entries, hidden and repeated ones too: reads
			// filter them.
			held := heldEntries(u, m.posts, m.rel)
			want := slices.Clone(held[:min(len(held), m.cfg.MaxLen)])
			slices.Reverse(want)
			if !stored.Complete || stored.Whole != (len(held) < m.cfg.MaxLen) || !slices.Equal(stored.IDs, want) {
				t.Fatalf("user %d's rebuilt feed holds %v (complete %v, whole %v), want %v", u, stored.IDs, stored.Complete, stored.Whole, want)
			}
		}),
		"operator drop": step(func(t *rapid.T) {
			// `newsfeed feed drop`: the next read rebuilds it.
			if err := m.feeds.Drop(context.Background(), m.user(t, "user")); err != nil {
				t.Fatal(err)
			}
		}),
		"lose redis": step(func(t *rapid.T) {
			// As FLUSHDB does to this check's keys: feeds, timelines,
			// caches, the ticket stream and its consumer group.
			if err := testenv.DeleteKeys(context.Background(), m.rdb, m.prefix+"*"); err != nil {
				t.Fatal(err)
			}
		}),
		"redeliver": step(func(t *rapid.T) {
			// A ticket delivered again: a lease that ran out, an
			// acknowledgement lost. The event is old; the world moved on.
			events := m.pastEvents(t)
			if len(events) == 0 {
				t.Skip("no event to redeliver")
			}
			e := rapid.SampledFrom(events).Draw(t, "event")
			if _, errs := m.queue.Publish(context.Background(), []domain.Event{e}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			m.deliver(t)
		}),
		"stale fan-out": step(func(t *rapid.T) {
			// A fan-out that read its page of followers before an unfollow
			// (or any other change) and writes after it: its page was read
			// after a position at which the user followed the author (0
			// when they never did, or when the fan-out does not say).
			if len(m.posts) == 0 {
				t.Skip("no post")
			}
			p := rapid.SampledFrom(m.posts).Draw(t, "post")
			u := m.user(t, "user")
			// Most often, a post of someone the user followed and no longer
			// does: the race the following check is there for.
			var unfollowed [][2]int64 // [user, index of the post]
			for i, q := range m.posts {
				for _, v := range m.users {
					if _, ok := m.pagesAt[[2]int64{v, q.author}]; ok && !m.rel.follows(v, q.author) {
						unfollowed = append(unfollowed, [2]int64{v, int64(i)})
					}
				}
			}
			if len(unfollowed) > 0 && rapid.IntRange(0, 3).Draw(t, "pick") > 0 {
				c := rapid.SampledFrom(unfollowed).Draw(t, "unfollowed")
				u, p = c[0], m.posts[c[1]]
			}
			asOf := m.pagesAt[[2]int64{u, p.author}]
			if rapid.Bool().Draw(t, "without position") {
				asOf = 0
			}
			ctx := context.Background()
			// A redelivery, or one that looks like a first delivery (as
			// a post whose fan-out split after an earlier delivery had
			// pushed it): the feed takes it without looking.
			first := rapid.Bool().Draw(t, "as a first delivery")
			if _, err := pushCount(m.feeds.Push(ctx, domain.Entry{PostID: p.id, AuthorID: p.author}, []int64{u}, asOf, first)); err != nil {
				t.Fatal(err)
			}
			if err := m.feeds.AddToTimeline(ctx, domain.Entry{PostID: p.id, AuthorID: p.author}); err != nil {
				t.Fatal(err)
			}
		}),
		"": func(t *rapid.T) { m.checkEveryFeed(t) },
	}
}

func (m *model) user(t *rapid.T, label string) int64 {
	return rapid.SampledFrom(m.users).Draw(t, label)
}

// pair draws two different users.
func (m *model) pair(t *rapid.T) (int64, int64) {
	a := m.user(t, "follower")
	b := rapid.SampledFrom(slices.DeleteFunc(slices.Clone(m.users), func(u int64) bool { return u == a })).Draw(t, "followee")
	return a, b
}

// post creates a post by author (without delivering it).
func (m *model) post(t *rapid.T, author int64) truthPost {
	p := truthPost{id: m.pipeline.post(t, author), author: author}
	m.posts = append(m.posts, p)
	return p
}

// post creates a post by author and returns its id (without delivering it).
func (m *pipeline) post(t tb, author int64) int64 {
	t.Helper()
	res := m.call(t, author, http.MethodPost, "/v1/posts", `{"body":"a post"}`)
	m.expect(t, res, http.StatusCreated)
	var p apiPost
	if err := json.Unmarshal(res.Body.Bytes(), &p); err != nil {
		t.Fatalf("%v", err)
	}
	return p.ID
}

// repost has u repost target, with the status the model expects: 404 for a
// deleted post or one hidden from u (the target's author or its
// original's muted by u, or behind a block either way), 422 for one's own post or a repost of it, 200
// with the first repost for a repeat, else 201 and a new entry (without
// delivering it). A repost of a repost reposts its original.
func (m *model) repost(t *rapid.T, u int64, target truthPost) {
	orig := target
	if target.repostOf != 0 {
		orig = m.find(target.repostOf)
	}
	first, again := m.liveRepost(u, orig.id)
	want := http.StatusCreated
	switch {
	case target.deleted:
		want = http.StatusNotFound
	case m.rel.blocked(u, target.author) || m.rel.blocked(u, orig.author) ||
		m.rel.mutes(u, target.author) || m.rel.mutes(u, orig.author): // hidden from u
		want = http.StatusNotFound
	case orig.author == u:
		want = http.StatusUnprocessableEntity
	case again:
		want = http.StatusOK
	}
	res := m.call(t, u, http.MethodPost, "/v1/posts/"+strconv.FormatInt(target.id, 10)+"/reposts")
	m.expect(t, res, want)
	if want != http.StatusCreated && want != http.StatusOK {
		return
	}
	var r apiRepost
	if err := json.Unmarshal(res.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	switch {
	case r.AuthorID != u || r.RepostOf == nil || r.RepostOf.ID != orig.id || r.RepostOf.AuthorID != orig.author:
		t.Fatalf("user %d reposted %d (original %d by %d): got %s", u, target.id, orig.id, orig.author, res.Body)
	case again && r.ID != first.id:
		t.Fatalf("user %d reposted %d again: got repost %d, want the first, %d", u, orig.id, r.ID, first.id)
	case !again && len(m.posts) > 0 && r.ID <= m.posts[len(m.posts)-1].id:
		t.Fatalf("user %d reposted %d: a new repost with id %d, not above %d", u, orig.id, r.ID, m.posts[len(m.posts)-1].id)
	}
	if !again {
		m.posts = append(m.posts, truthPost{id: r.ID, author: u, repostOf: orig.id})
	}
}

// apiRepost is the JSON shape of a repost.
type apiRepost struct {
	ID       int64 `json:"id"`
	AuthorID int64 `json:"author_id"`
	RepostOf *struct {
		ID       int64 `json:"id"`
		AuthorID int64 `json:"author_id"`
	} `json:"repost_of"`
}

// liveRepost returns u's repost of original, if there is one not deleted.
func (m *model) liveRepost(u, original int64) (truthPost, bool) {
	for _, p := range m.posts {
		if p.author == u && p.repostOf == original && !p.deleted {
			return p, true
		}
	}
	return truthPost{}, false
}

// delete deletes p, a post or a repost, as its author; a post takes its
// reposts with it.
func (m *model) delete(t *rapid.T, p truthPost) {
	m.expect(t, m.call(t, p.author, http.MethodDelete, "/v1/posts/"+strconv.FormatInt(p.id, 10)), http.StatusNoContent)
	for i, q := range m.posts {
		if q.id == p.id || q.repostOf == p.id {
			m.posts[i].deleted = true
		}
	}
}

// follow has a follow b: 403 while a block stands between them.
func (m *model) follow(t *rapid.T, a, b int64) {
	want := http.StatusNoContent
	if m.rel.blocked(a, b) {
		want = http.StatusForbidden
	}
	m.expect(t, m.call(t, a, http.MethodPut, "/v1/following/"+strconv.FormatInt(b, 10)), want)
	if want != http.StatusNoContent {
		return
	}
	m.rel.follow[[2]int64{a, b}] = true
	at, err := m.db.WritePosition(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.pagesAt[[2]int64{a, b}] = at
}

func (m *model) unfollow(t *rapid.T, a, b int64) {
	m.expect(t, m.call(t, a, http.MethodDelete, "/v1/following/"+strconv.FormatInt(b, 10)), http.StatusNoContent)
	delete(m.rel.follow, [2]int64{a, b})
}

// mute has a mute b (on) or unmute b.
func (m *model) mute(t *rapid.T, a, b int64, on bool) {
	m.expect(t, m.call(t, a, onOff(on), "/v1/mutes/"+strconv.FormatInt(b, 10)), http.StatusNoContent)
	setRelation(m.rel.mute, a, b, on)
}

// block has a block b (on), which removes the follows between them both
// ways, or unblock b, which leaves them removed.
func (m *model) block(t *rapid.T, a, b int64, on bool) {
	m.expect(t, m.call(t, a, onOff(on), "/v1/blocks/"+strconv.FormatInt(b, 10)), http.StatusNoContent)
	setRelation(m.rel.block, a, b, on)
	if on {
		delete(m.rel.follow, [2]int64{a, b})
		delete(m.rel.follow, [2]int64{b, a})
	}
}

func onOff(on bool) string {
	if on {
		return http.MethodPut
	}
	return http.MethodDelete
}

func setRelation(r map[[2]int64]bool, a, b int64, on bool) {
	if on {
		r[[2]int64{a, b}] = true
	} else {
		delete(r, [2]int64{a, b})
	}
}

func (m *model) find(id int64) truthPost {
	p, _ := findPost(m.posts, id)
	return p
}

// contested returns the entries of shown (reader's feed) whose original
// has another live entry by the reader or someone they follow: when the
// shown one goes, another may show.
func (m *model) contested(reader int64, shown []int64) []int64 {
	var out []int64
	for _, id := range shown {
		p := m.find(id)
		orig := cmp.Or(p.repostOf, p.id)
		for _, q := range m.posts {
			if q.id != id && !q.deleted && cmp.Or(q.repostOf, q.id) == orig && (q.author == reader || m.rel.follows(reader, q.author)) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

func (m *model) livePosts() []truthPost {
	var live []truthPost
	for _, p := range m.posts {
		if !p.deleted {
			live = append(live, p)
		}
	}
	return live
}

// truth is the reader's home feed below before (0: all), computed from the
// model's record alone.
func (m *model) truth(reader, before int64) []int64 {
	return homeFeed(reader, m.posts, m.rel, before)
}

// diff says how a feed read differs from the truth.
func (m *model) diff(reader int64, got, want []int64) string {
	return explainFeed(reader, m.posts, m.rel, got, want)
}

func (m *model) checkEveryFeed(t *rapid.T) {
	// Pages of every size where Redis hands over to PostgreSQL (past
	// max_len and its slack), then pages of 100 to get through long feeds
	// quickly.
	near := m.cfg.MaxLen + m.cfg.MaxLen/16 + 8
	for _, u := range m.users {
		limit := rapid.SampledFrom([]int{1, 2, 3, 5, 7, 20}).Draw(t, "check limit")
		got := m.readFrom(t, u, limit, "", near)
		if want := m.truth(u, 0); !slices.Equal(got, want) {
			t.Fatalf("user %d's feed (pages of %d) holds %v, want %v: %s", u, limit, got, want, m.diff(u, got, want))
		}
	}
}

// readFrom pages through a feed from cursor (empty: the newest) to its end,
// in pages of limit for the first (at least) small items, then of 100.
func (m *pipeline) readFrom(t tb, reader int64, limit int, cursor string, small int) []int64 {
	t.Helper()
	var all []int64
	for range 1000 {
		if len(all) >= small {
			limit = 100
		}
		items, next := m.page(t, reader, limit, cursor)
		all = append(all, items...)
		if next == nil {
			return all
		}
		if len(items) == 0 {
			t.Fatalf("user %d: an empty page with a next cursor", reader)
		}
		cursor = *next
	}
	t.Fatalf("user %d: the feed never ended", reader)
	return nil
}

func (m *pipeline) page(t tb, reader int64, limit int, cursor string) ([]int64, *string) {
	t.Helper()
	path := "/v1/feed?limit=" + strconv.Itoa(limit)
	if cursor != "" {
		path += "&cursor=" + cursor
	}
	res := m.call(t, reader, http.MethodGet, path)
	m.expect(t, res, http.StatusOK)
	var page apiPage[apiPost]
	if err := json.Unmarshal(res.Body.Bytes(), &page); err != nil {
		t.Fatalf("%v", err)
	}
	if len(page.Items) > limit {
		t.Fatalf("user %d: a page of %d items for limit %d", reader, len(page.Items), limit)
	}
	ids := make([]int64, len(page.Items))
	for i, p := range page.Items {
		ids[i] = p.ID
	}
	return ids, page.NextCursor
}

// call makes a request as user as and returns the response.
func (m *pipeline) call(t tb, as int64, method, path string, body ...string) *httptest.ResponseRecorder {
	t.Helper()
	tok, ok := m.tokens[as]
	if !ok {
		var err error
		if tok, err = api.IssueToken(testSecret, as, time.Hour); err != nil {
			t.Fatalf("%v", err)
		}
		m.tokens[as] = tok
	}
	var req *http.Request
	var sent []byte
	if len(body) > 0 {
		sent = []byte(body[0])
		req = httptest.NewRequest(method, path, bytes.NewReader(sent))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	m.e.ServeHTTP(rec, req)
	if err := checkSpec(req, sent, response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}); err != nil {
		t.Fatalf("%v", err)
	}
	return rec
}

func (m *pipeline) expect(t tb, res *httptest.ResponseRecorder, status int) {
	t.Helper()
	if res.Code != status {
		t.Fatalf("status %d, want %d: %s", res.Code, status, res.Body.String())
	}
}

// deliver runs the dispatcher until every event of this check is finished
// and the queue is empty; a dead event fails the check.
func (m *pipeline) deliver(t tb) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := m.disp.DispatchOnce(ctx); err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		var open int
		var dead string
		err := m.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE status NOT IN ('done', 'dead')),
       COALESCE(string_agg(event_type || ' ' || payload::text || ': ' || last_error, '; ') FILTER (WHERE status = 'dead'), '')
FROM outbox WHERE id > $1`, m.firstEvent).Scan(&open, &dead)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if dead != "" {
			t.Fatalf("dead events: %s", dead)
		}
		queued, err := m.rdb.XLen(ctx, m.queue.Stream()).Result()
		if err != nil {
			t.Fatalf("%v", err)
		}
		if open == 0 && queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			var why string
			_ = m.pool.QueryRow(ctx, `
SELECT COALESCE(string_agg(event_type || ' ' || payload::text || ' ' || status || ': ' || COALESCE(last_error, ''), '; '), '')
FROM outbox WHERE id > $1 AND status NOT IN ('done', 'dead')`, m.firstEvent).Scan(&why)
			if os.Getenv("NEWSFEED_MODEL_DUMP") != "" {
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
				rows, _ := m.pool.Query(ctx, `SELECT pid, state, wait_event_type, wait_event, left(query, 200), now() - xact_start FROM pg_stat_activity WHERE datname = current_database()`)
				for rows.Next() {
					var pid int
					var st, wt, we, q, age any
					_ = rows.Scan(&pid, &st, &wt, &we, &q, &age)
					fmt.Fprintln(os.Stderr, "PGACT", pid, st, wt, we, q, age)
				}
				rows.Close()
			}
			t.Fatalf("events not delivered after 30s: %d open (%s), %d tickets queued", open, why, queued)
		}
		time.Sleep(time.Millisecond)
	}
}

// pastEvents returns this check's finished outbox events as the queue
// carries them.
func (m *model) pastEvents(t *rapid.T) []domain.Event {
	rows, err := m.pool.Query(context.Background(), `
SELECT id, event_type, payload, attempts, created_at FROM outbox
WHERE id > $1 AND status = 'done' ORDER BY id`, m.firstEvent)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var events []domain.Event
	for rows.Next() {
		var e domain.Event
		if err := rows.Scan(&e.ID, &e.Type, &e.Payload, &e.Attempt, &e.CreatedAt); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// pushed is what the tests count of a push: how many feeds gained it.
func pushCount(res domain.PushResult, err error) (int, error) { return res.Added, err }
