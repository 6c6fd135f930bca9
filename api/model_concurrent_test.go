package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// TestFeedModelConcurrent is the concurrent sibling of TestFeedModel:
// several clients post, delete, follow, unfollow (often a follow and an
// unfollow of the same account at once, as a double click or two devices
// send them), lose feeds and read, all at the same time, against the real
// API, dispatcher, queue and worker — with failpoints that stall a request
// between its PostgreSQL commit and its Redis step, a fan-out between its
// page of followers and its push, an event handler between the state it
// read and its write, and a rebuild between its load and its finish.
//
// Every read is checked with a linearizability checker (porcupine): some
// instant inside the read's interval must exist at which it shows exactly
// what the contract allows — no post of an author the reader does not
// follow, no deleted post, no repeat, and every post whose fan-out had
// finished by then of the authors the reader follows (posts still on their
// way may or may not show). After the clients stop and every event is
// delivered, every feed must equal the truth computed from what PostgreSQL
// ended up with.
//
// Reproduce the draws of a failure with NEWSFEED_MODEL_SEED=N (the
// interleaving itself is the machine's); run more rounds with
// NEWSFEED_MODEL_ROUNDS.
func TestFeedModelConcurrent(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("model-based test: not in -short")
	}
	rounds := 4
	if raceDetector {
		rounds = 2
	}
	if v, err := strconv.Atoi(os.Getenv("NEWSFEED_MODEL_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	seed := rand.Uint64() >> 12
	if v, err := strconv.ParseUint(os.Getenv("NEWSFEED_MODEL_SEED"), 10, 64); err == nil {
		seed = v
	}
	env := newModelEnv(t)
	for r := range uint64(rounds) {
		s := seed + r
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			runConcurrentRound(t, env, s)
		})
	}
}

// concurrentClients and concurrentOps size a round: enough overlap to
// interleave every pair of operations, few enough posts that one page of
// 100 holds a whole feed.
const (
	concurrentClients = 5
	concurrentOps     = 30
	concurrentPosts   = 70
)

// history is a concurrent history of operations, for porcupine.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in opInput, call int64, out opOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: h.now()})
}

type opKind int

const (
	opPost opKind = iota
	opDelete
	opFollow
	opUnfollow
	opRead
	opDelivered // a post's fan-out finished (observed in the outbox)
)

type opInput struct {
	kind  opKind
	user  int64 // the author, the follower, the reader
	other int64 // the followee
	post  int64 // the post deleted or delivered
}

type opOutput struct {
	post int64   // the post created
	ids  []int64 // what a read showed
}

// concurrentRound is one round's world: the pipeline, its users and what
// the clients know.
type concurrentRound struct {
	*pipeline
	t        *testing.T
	hist     *history
	users    []int64
	tokens   map[int64]string
	stallCtx context.Context

	mu    sync.Mutex
	posts map[int64][]int64 // author → live posts the clients know of
	count int
}

func runConcurrentRound(t *testing.T, env *modelEnv, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := modelConfig{
		MaxLen:             []int{4, 8, 40}[rng.IntN(3)],
		Backfill:           50, // every post of an author: a follow shows them all
		ChunkSize:          []int{2, 1000}[rng.IntN(2)],
		PageSize:           []int{1, 1000}[rng.IntN(2)],
		CelebrityThreshold: []int64{0, 0, 2}[rng.IntN(3)],
	}
	n := env.checks.Add(1)
	// Stall at every failpoint now and then: mostly for up to 30 ms, long
	// enough for a competing request to overtake, sometimes for up to
	// 150 ms, long enough for the competing change's event to be handled
	// too.
	stall := failpoint.Func(func(ctx context.Context, _ failpoint.Point) {
		if rand.IntN(3) != 0 {
			return
		}
		d := time.Duration(rand.IntN(30_000)) * time.Microsecond
		if rand.IntN(4) == 0 {
			d = time.Duration(50+rand.IntN(100)) * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	})
	ctx := failpoint.With(context.Background(), stall)
	r := &concurrentRound{
		t:        t,
		hist:     &history{start: time.Now()},
		tokens:   map[int64]string{},
		stallCtx: ctx,
		posts:    map[int64][]int64{},
	}
	r.pipeline = startPipelineCtx(ctx, t, env.pool, env.rdb, env.cluster, env.prefix+"c"+strconv.FormatInt(n, 10)+":", cfg)
	for i := range int64(4) {
		u := 900_000 + n*100 + i + 1
		r.users = append(r.users, u)
		tok, err := api.IssueToken(testSecret, u, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		r.tokens[u] = tok
	}
	t.Logf("config %+v, users %v", cfg, r.users)

	// The dispatcher runs all along, and a poller records when each post's
	// fan-out finished.
	// (Stopped between passes, not in one: a pass cut short leaves rows
	// claimed until their lease runs out.)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if _, err := r.disp.DispatchOnce(context.Background()); err != nil {
				t.Errorf("dispatch: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	delivered := map[int64]bool{}
	poll := func() {
		call := r.hist.now()
		for _, id := range r.finishedPosts(t) {
			if !delivered[id] {
				delivered[id] = true
				r.hist.add(concurrentClients+1, opInput{kind: opDelivered, post: id}, call, opOutput{})
			}
		}
	}
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
		for !stop.Load() {
			poll()
			time.Sleep(2 * time.Millisecond)
		}
	})

	var clients sync.WaitGroup
	for c := range concurrentClients {
		crng := rand.New(rand.NewPCG(seed, uint64(c)+2))
		clients.Go(func() {
			for range concurrentOps {
				if t.Failed() {
					return
				}
				r.randomOp(c, crng)
			}
		})
	}
	clients.Wait()
	stop.Store(true)
	wg.Wait()
	pollWG.Wait()
	if t.Failed() {
		return
	}
	r.deliver(t)
	poll()

	r.checkHistory(t)
	r.checkQuiescent(t)
}

// randomOp runs one operation drawn by rng as client c.
func (r *concurrentRound) randomOp(c int, rng *rand.Rand) {
	u := r.users[rng.IntN(len(r.users))]
	other := r.users[rng.IntN(len(r.users))]
	for other == u {
		other = r.users[rng.IntN(len(r.users))]
	}
	switch w := rng.IntN(16); {
	case w < 3:
		r.post(c, u)
	case w < 4:
		r.deleteOne(c, u, rng)
	case w < 6:
		r.follow(c, u, other, true)
	case w < 8:
		r.follow(c, u, other, false)
	case w < 10:
		// A follow and an unfollow of the same account at once.
		var both sync.WaitGroup
		first := rng.IntN(2) == 0
		both.Go(func() { r.follow(c, u, other, first) })
		both.Go(func() { r.follow(c+concurrentClients+2, u, other, !first) })
		both.Wait()
	case w < 11:
		// A lost feed: the next read rebuilds it, racing the rest.
		if err := r.rdb.Del(context.Background(), feed.Key(r.prefix, u)).Err(); err != nil {
			r.t.Error(err)
		}
	default:
		r.read(c, u)
	}
}

func (r *concurrentRound) post(c int, author int64) {
	r.mu.Lock()
	if r.count >= concurrentPosts {
		r.mu.Unlock()
		return
	}
	r.count++
	r.mu.Unlock()
	call := r.hist.now()
	rec := r.do(author, http.MethodPost, "/v1/posts", `{"body":"a post"}`)
	if rec.Code != http.StatusCreated {
		r.t.Errorf("post: status %d: %s", rec.Code, rec.Body)
		return
	}
	var p apiPost
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		r.t.Error(err)
		return
	}
	r.hist.add(c, opInput{kind: opPost, user: author}, call, opOutput{post: p.ID})
	r.mu.Lock()
	r.posts[author] = append(r.posts[author], p.ID)
	r.mu.Unlock()
}

func (r *concurrentRound) deleteOne(c int, author int64, rng *rand.Rand) {
	r.mu.Lock()
	live := r.posts[author]
	if len(live) == 0 {
		r.mu.Unlock()
		return
	}
	i := rng.IntN(len(live))
	id := live[i]
	r.posts[author] = slices.Delete(slices.Clone(live), i, i+1)
	r.mu.Unlock()
	call := r.hist.now()
	rec := r.do(author, http.MethodDelete, "/v1/posts/"+strconv.FormatInt(id, 10))
	if rec.Code != http.StatusNoContent {
		r.t.Errorf("delete: status %d: %s", rec.Code, rec.Body)
		return
	}
	r.hist.add(c, opInput{kind: opDelete, user: author, post: id}, call, opOutput{})
}

func (r *concurrentRound) follow(c int, follower, followee int64, follow bool) {
	method, kind := http.MethodPut, opFollow
	if !follow {
		method, kind = http.MethodDelete, opUnfollow
	}
	call := r.hist.now()
	rec := r.do(follower, method, "/v1/following/"+strconv.FormatInt(followee, 10))
	if rec.Code != http.StatusNoContent {
		r.t.Errorf("%s following: status %d: %s", method, rec.Code, rec.Body)
		return
	}
	r.hist.add(c, opInput{kind: kind, user: follower, other: followee}, call, opOutput{})
}

func (r *concurrentRound) read(c int, reader int64) {
	call := r.hist.now()
	rec := r.do(reader, http.MethodGet, "/v1/feed?limit=100")
	if rec.Code != http.StatusOK {
		r.t.Errorf("read: status %d: %s", rec.Code, rec.Body)
		return
	}
	var page apiPage[apiPost]
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		r.t.Error(err)
		return
	}
	ids := make([]int64, len(page.Items))
	for i, p := range page.Items {
		ids[i] = p.ID
	}
	r.hist.add(c, opInput{kind: opRead, user: reader}, call, opOutput{ids: ids})
}

// do makes a request as user, under the round's failpoints.
func (r *concurrentRound) do(as int64, method, path string, body ...string) *httptest.ResponseRecorder {
	var req *http.Request
	if len(body) > 0 {
		req = httptest.NewRequestWithContext(r.stallCtx, method, path, bytes.NewReader([]byte(body[0])))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req = httptest.NewRequestWithContext(r.stallCtx, method, path, nil)
	}
	req.Header.Set("Authorization", "Bearer "+r.tokens[as])
	rec := httptest.NewRecorder()
	r.e.ServeHTTP(rec, req)
	return rec
}

// finishedPosts returns the posts of this round whose fan-out finished.
func (r *concurrentRound) finishedPosts(t *testing.T) []int64 {
	rows, err := r.pool.Query(context.Background(), `
SELECT (payload->>'post_id')::bigint FROM outbox
WHERE id > $1 AND event_type = 'post.created' AND status = 'done'`, r.firstEvent)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Error(err)
			return nil
		}
		ids = append(ids, id)
	}
	return ids
}

// checkHistory checks every read of the history against the model, a
// reader at a time (porcupine's partitions: a reader's reads depend on the
// posts, their deletes and deliveries, and on whom that reader follows).
func (r *concurrentRound) checkHistory(t *testing.T) {
	for _, op := range r.hist.ops {
		if op.Input.(opInput).kind != opRead {
			continue
		}
		ids := op.Output.(opOutput).ids
		if !slices.IsSortedFunc(ids, func(a, b int64) int { return int(b - a) }) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("user %d: a read not newest first without repeats: %v", op.Input.(opInput).user, ids)
		}
	}
	res, info := porcupine.CheckOperationsVerbose(feedModel(), r.hist.ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations linearizable", len(r.hist.ops))
	case porcupine.Unknown:
		t.Logf("linearizability check timed out on %d operations; the quiescent check still runs", len(r.hist.ops))
	default:
		dir := t.ArtifactDir()
		if d := os.Getenv("NEWSFEED_MODEL_DUMP"); d != "" && d != "1" {
			dir = d
		}
		path := filepath.Join(dir, "history-"+strings.ReplaceAll(t.Name(), "/", "-")+".html")
		if err := porcupine.VisualizePath(feedModel(), info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Errorf("the reads are not linearizable with the writes (the history, drawn: %s)", path)
		if os.Getenv("NEWSFEED_MODEL_DUMP") != "" {
			m := feedModel()
			m.Partition = nil
			for _, part := range append(partitionByReader(r.hist.ops), r.hist.ops) {
				if porcupine.CheckOperations(m, part) {
					continue
				}
				sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
				for _, op := range part {
					t.Logf("%8.2f %8.2f  %s", float64(op.Call)/1e6, float64(op.Return)/1e6, m.DescribeOperation(op.Input, op.Output))
				}
				break
			}
		}
	}
}

// checkQuiescent pages through every feed once every event is delivered
// and compares it with the truth in PostgreSQL.
func (r *concurrentRound) checkQuiescent(t *testing.T) {
	ctx := context.Background()
	for _, u := range r.users {
		var want []int64
		rows, err := r.pool.Query(ctx, `
SELECT p.id FROM posts p JOIN follows f ON f.followee_id = p.author_id
WHERE f.follower_id = $1 AND p.deleted_at IS NULL ORDER BY p.id DESC`, u)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		rows.Close()
		for pass := range 2 { // twice: a wrong feed stays wrong
			got := r.readFrom(t, u, 7, "", 0)
			if !slices.Equal(got, want) {
				t.Errorf("user %d's feed, read %d times after every event was delivered, holds %v, want %v (%s): %s",
					u, pass+1, got, want, r.followsOf(t, u), r.quiescentDiff(t, got, want))
				break
			}
		}
	}
}

// quiescentDiff says what a feed shows that it should not, and what it
// misses, with each post's author.
func (r *concurrentRound) quiescentDiff(t *testing.T, got, want []int64) string {
	author := func(id int64) int64 {
		var a int64
		if err := r.pool.QueryRow(context.Background(), `SELECT author_id FROM posts WHERE id = $1`, id).Scan(&a); err != nil {
			t.Error(err)
		}
		return a
	}
	var extra, missing []string
	for _, id := range got {
		if !slices.Contains(want, id) {
			extra = append(extra, fmt.Sprintf("%d by %d", id, author(id)))
		}
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			missing = append(missing, fmt.Sprintf("%d by %d", id, author(id)))
		}
	}
	return fmt.Sprintf("shows %v that it should not, misses %v", extra, missing)
}

func (r *concurrentRound) followsOf(t *testing.T, u int64) string {
	var who []string
	rows, err := r.pool.Query(context.Background(), `SELECT followee_id FROM follows WHERE follower_id = $1 ORDER BY 1`, u)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		who = append(who, strconv.FormatInt(id, 10))
	}
	return "follows " + strings.Join(who, ", ")
}

// feedState is the model's state for one reader's partition: the posts
// (ascending ids) and whom the reader follows.
type feedState struct {
	posts   []modelPostState
	follows map[int64]bool // followee → followed
}

type modelPostState struct {
	id, author         int64
	deleted, delivered bool
}

func (s feedState) with(f func(*feedState)) feedState {
	c := feedState{posts: slices.Clone(s.posts), follows: make(map[int64]bool, len(s.follows))}
	for k, v := range s.follows {
		c.follows[k] = v
	}
	f(&c)
	return c
}

func (s feedState) find(id int64) int {
	return sort.Search(len(s.posts), func(i int) bool { return s.posts[i].id >= id })
}

// feedModel is the contract's home feed, as porcupine checks it.
func feedModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByReader,
		Init:      func() any { return feedState{follows: map[int64]bool{}} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(feedState), input.(opInput), output.(opOutput)
			switch in.kind {
			case opPost:
				return true, s.with(func(c *feedState) {
					i := c.find(out.post)
					c.posts = slices.Insert(c.posts, i, modelPostState{id: out.post, author: in.user})
				})
			case opDelete, opDelivered:
				i := s.find(in.post)
				if i == len(s.posts) || s.posts[i].id != in.post {
					return false, s // not created yet: linearize the create first
				}
				return true, s.with(func(c *feedState) {
					if in.kind == opDelete {
						c.posts[i].deleted = true
					} else {
						c.posts[i].delivered = true
					}
				})
			case opFollow, opUnfollow:
				return true, s.with(func(c *feedState) { c.follows[in.other] = in.kind == opFollow })
			case opRead:
				shown := make(map[int64]bool, len(out.ids))
				for _, id := range out.ids {
					shown[id] = true
				}
				for _, p := range s.posts {
					allowed := s.follows[p.author] && !p.deleted
					if shown[p.id] && !allowed {
						return false, s // shows what it must not
					}
					if !shown[p.id] && allowed && p.delivered {
						return false, s // misses a post delivered already
					}
					delete(shown, p.id)
				}
				return len(shown) == 0, s // nothing it shows is unknown
			}
			return false, s
		},
		Equal: func(a, b any) bool {
			x, y := a.(feedState), b.(feedState)
			if !slices.Equal(x.posts, y.posts) || len(x.follows) != len(y.follows) {
				return false
			}
			for k, v := range x.follows {
				if w, ok := y.follows[k]; !ok || w != v {
					return false
				}
			}
			return true
		},
		Hash: func(state any) uint64 {
			s := state.(feedState)
			h := fnv.New64a()
			for _, p := range s.posts {
				fmt.Fprintf(h, "%d/%d/%t/%t;", p.id, p.author, p.deleted, p.delivered)
			}
			keys := make([]int64, 0, len(s.follows))
			for k := range s.follows {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(h, "%d=%t;", k, s.follows[k])
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(opInput), output.(opOutput)
			switch in.kind {
			case opPost:
				return fmt.Sprintf("post by %d → %d", in.user, out.post)
			case opDelete:
				return fmt.Sprintf("delete %d", in.post)
			case opDelivered:
				return fmt.Sprintf("delivered %d", in.post)
			case opFollow:
				return fmt.Sprintf("%d follows %d", in.user, in.other)
			case opUnfollow:
				return fmt.Sprintf("%d unfollows %d", in.user, in.other)
			default:
				return fmt.Sprintf("%d reads %v", in.user, out.ids)
			}
		},
		DescribeState: func(state any) string {
			s := state.(feedState)
			return fmt.Sprintf("follows %v, posts %v", s.follows, s.posts)
		},
	}
}

// partitionByReader splits a history into one per reader: the reader's
// reads and follows, and every post, delete and delivery.
func partitionByReader(ops []porcupine.Operation) [][]porcupine.Operation {
	readers := map[int64]bool{}
	for _, op := range ops {
		if in := op.Input.(opInput); in.kind == opRead {
			readers[in.user] = true
		}
	}
	var out [][]porcupine.Operation
	for u := range readers {
		var part []porcupine.Operation
		for _, op := range ops {
			in := op.Input.(opInput)
			switch in.kind {
			case opPost, opDelete, opDelivered:
				part = append(part, op)
			default:
				if in.user == u {
					part = append(part, op)
				}
			}
		}
		out = append(out, part)
	}
	return out
}
