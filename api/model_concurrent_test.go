package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
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
// several clients post, repost, delete posts and reposts, follow, unfollow,
// mute, unmute, block, unblock (often a change and its undoing at once, as
// a double click or two devices send them; a repost twice at once; a
// repost and the delete of its original at once), lose feeds and read, all
// at the same time, against the real API, dispatcher, queue and worker —
// with failpoints that stall a request between its PostgreSQL commit and
// its Redis step, a fan-out between its page of followers and its push, an
// event handler between the state it read and its write, and a rebuild
// between its load and its finish.
//
// The history is checked with a linearizability checker (porcupine): some
// order of the operations, each at an instant inside its interval, must
// exist in which every request got the status the contract gives it then
// (a repost 201, 200 with the first, 404 or 422; a follow 204 or 403; a
// delete 204 or 404), and every read shows what the contract allows then —
// nothing but entries of homeFeed (docs/API.md, "What a home feed holds"),
// and every entry of it that is the reader's own or whose fan-out had
// finished (entries still on their way may or may not show). After the
// clients stop and every event is delivered, PostgreSQL must hold the
// follows, mutes and blocks the model recorded (where concurrent changes
// of one relation left it either way, it decides), and every feed, paged
// through, must equal homeFeed of the model's record.
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
// 100 holds a whole feed (it shows each original once, reposted or not).
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
	opRepost
	opDelete
	opFollow
	opUnfollow
	opMute
	opUnmute
	opBlock
	opUnblock
	opRead
	opDelivered // a post's or repost's fan-out finished (observed in the outbox)
)

type opInput struct {
	kind  opKind
	user  int64 // the author, the reposter, the follower, the muter, the blocker, the reader
	other int64 // the followee, the muted, the blocked
	post  int64 // the post reposted, deleted or delivered
}

type opOutput struct {
	status int
	post   int64   // the post or repost created (a repeated repost: the first)
	orig   int64   // a repost's original
	ids    []int64 // what a read showed
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
	known []truthPost       // every post and repost created
	own   map[int64][]int64 // author → their posts and reposts that no client deleted
	count int               // posts (not reposts) created
}

func runConcurrentRound(t *testing.T, env *modelEnv, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := modelConfig{
		MaxLen:             []int{4, 8, 40}[rng.IntN(3)],
		Backfill:           50, // every post of an author: a follow shows them all
		ChunkSize:          []int{2, 1000}[rng.IntN(2)],
		PageSize:           []int{1, 1000}[rng.IntN(2)],
		CelebrityThreshold: []int64{0, 0, 2}[rng.IntN(3)],
		// Drawn apart, so that the seeds of earlier rounds replay their draws.
		FollowingThreshold: []int64{0, 0, 1, 2}[rand.New(rand.NewPCG(seed, 2)).IntN(4)],
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
		own:      map[int64][]int64{},
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
	// A change and its undoing (first, then second) at once, as a double
	// click or two devices send them.
	both := func(first, second func(c int)) {
		var wg sync.WaitGroup
		if rng.IntN(2) == 0 {
			first, second = second, first
		}
		wg.Go(func() { first(c) })
		wg.Go(func() { second(c + concurrentClients + 2) })
		wg.Wait()
	}
	switch w := rng.IntN(40); {
	case w < 6:
		r.post(c, u)
	case w < 12:
		if p, ok := r.target(rng); ok {
			r.repost(c, u, p.id)
		}
	case w < 14:
		r.deleteOne(c, u, rng)
	case w < 18:
		r.follow(c, u, other, true)
	case w < 20:
		r.follow(c, u, other, false)
	case w < 22:
		both(func(c int) { r.follow(c, u, other, true) }, func(c int) { r.follow(c, u, other, false) })
	case w < 24:
		r.relation(c, u, other, opMute, rng.IntN(3) > 0)
	case w < 26:
		// Mostly unblocks: blocks that stood all along would leave little
		// to follow and to repost.
		r.relation(c, u, other, opBlock, rng.IntN(3) == 0)
	case w < 27:
		kind := []opKind{opMute, opBlock}[rng.IntN(2)]
		both(func(c int) { r.relation(c, u, other, kind, true) }, func(c int) { r.relation(c, u, other, kind, false) })
	case w < 28:
		// A repost twice at once (one 201, one 200 with the same repost),
		// or a repost and the delete of its original at once.
		if rng.IntN(2) == 0 {
			if p, ok := r.target(rng); ok {
				both(func(c int) { r.repost(c, u, p.id) }, func(c int) { r.repost(c, u, p.id) })
			}
		} else if id, ok := r.takeOwn(other, rng, true); ok {
			both(func(c int) { r.repost(c, u, id) }, func(c int) { r.delete(c, other, id) })
		}
	case w < 29:
		// A lost feed: the next read rebuilds it, racing the rest.
		if err := r.rdb.Del(context.Background(), feed.Key(r.prefix, u)).Err(); err != nil {
			r.t.Error(err)
		}
	default:
		r.read(c, u)
	}
}

// statuses are the statuses the contract gives each kind of request (the
// model says which one, in the state the request found).
var statuses = map[opKind][]int{
	opPost:     {http.StatusCreated},
	opRepost:   {http.StatusCreated, http.StatusOK, http.StatusNotFound, http.StatusUnprocessableEntity},
	opDelete:   {http.StatusNoContent, http.StatusNotFound},
	opFollow:   {http.StatusNoContent, http.StatusForbidden},
	opUnfollow: {http.StatusNoContent},
	opMute:     {http.StatusNoContent},
	opUnmute:   {http.StatusNoContent},
	opBlock:    {http.StatusNoContent},
	opUnblock:  {http.StatusNoContent},
}

// write makes the request of in as its user, and records it with what it
// answered. A status the contract never gives the request fails the test.
func (r *concurrentRound) write(c int, in opInput, method, path string, body ...string) (opOutput, bool) {
	call := r.hist.now()
	rec := r.do(in.user, method, path, body...)
	if !slices.Contains(statuses[in.kind], rec.Code) {
		r.t.Errorf("%s %s as %d: status %d: %s", method, path, in.user, rec.Code, rec.Body)
		return opOutput{}, false
	}
	out := opOutput{status: rec.Code}
	if rec.Code == http.StatusCreated || rec.Code == http.StatusOK {
		var p apiRepost
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			r.t.Error(err)
			return opOutput{}, false
		}
		if p.AuthorID != in.user || (in.kind == opRepost) != (p.RepostOf != nil) {
			r.t.Errorf("%s %s as %d: got %s", method, path, in.user, rec.Body)
			return opOutput{}, false
		}
		out.post = p.ID
		if p.RepostOf != nil {
			out.orig = p.RepostOf.ID
		}
	}
	r.hist.add(c, in, call, out)
	return out, true
}

func (r *concurrentRound) post(c int, author int64) {
	r.mu.Lock()
	if r.count >= concurrentPosts {
		r.mu.Unlock()
		return
	}
	r.count++
	r.mu.Unlock()
	if out, ok := r.write(c, opInput{kind: opPost, user: author}, http.MethodPost, "/v1/posts", `{"body":"a post"}`); ok {
		r.learn(truthPost{id: out.post, author: author})
	}
}

// repost has u repost the post or repost id.
func (r *concurrentRound) repost(c int, u, id int64) {
	out, ok := r.write(c, opInput{kind: opRepost, user: u, post: id}, http.MethodPost, "/v1/posts/"+strconv.FormatInt(id, 10)+"/reposts")
	if ok && out.status == http.StatusCreated {
		r.learn(truthPost{id: out.post, author: u, repostOf: out.orig})
	}
}

func (r *concurrentRound) learn(p truthPost) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known = append(r.known, p)
	r.own[p.author] = append(r.own[p.author], p.id)
}

// target draws a post or repost to repost: any that was created, mostly
// among the newest (deleted ones too: the answer is 404 then).
func (r *concurrentRound) target(rng *rand.Rand) (truthPost, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.known) == 0 {
		return truthPost{}, false
	}
	from := 0
	if rng.IntN(3) > 0 {
		from = max(0, len(r.known)-8)
	}
	return r.known[from+rng.IntN(len(r.known)-from)], true
}

// takeOwn takes one of author's posts (only originals: originals) that no
// client deleted yet, for a client to delete.
func (r *concurrentRound) takeOwn(author int64, rng *rand.Rand, originals bool) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int64
	for _, id := range r.own[author] {
		if i := slices.IndexFunc(r.known, func(p truthPost) bool { return p.id == id }); !originals || r.known[i].repostOf == 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, false
	}
	id := ids[rng.IntN(len(ids))]
	r.own[author] = slices.DeleteFunc(slices.Clone(r.own[author]), func(x int64) bool { return x == id })
	return id, true
}

// deleteOne deletes one of author's posts or reposts. (A repost whose
// original is gone went with it: 404.)
func (r *concurrentRound) deleteOne(c int, author int64, rng *rand.Rand) {
	if id, ok := r.takeOwn(author, rng, false); ok {
		r.delete(c, author, id)
	}
}

func (r *concurrentRound) delete(c int, author, id int64) {
	r.write(c, opInput{kind: opDelete, user: author, post: id}, http.MethodDelete, "/v1/posts/"+strconv.FormatInt(id, 10))
}

func (r *concurrentRound) follow(c int, follower, followee int64, follow bool) {
	method, kind := http.MethodPut, opFollow
	if !follow {
		method, kind = http.MethodDelete, opUnfollow
	}
	r.write(c, opInput{kind: kind, user: follower, other: followee}, method, "/v1/following/"+strconv.FormatInt(followee, 10))
}

// relation has user mute (kind opMute) or block (opBlock) other, or undo
// it (on false).
func (r *concurrentRound) relation(c int, user, other int64, kind opKind, on bool) {
	path := "/v1/mutes/"
	if kind == opBlock {
		path = "/v1/blocks/"
	}
	if !on {
		kind++ // opUnmute, opUnblock
	}
	r.write(c, opInput{kind: kind, user: user, other: other}, onOff(on), path+strconv.FormatInt(other, 10))
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
	if page.NextCursor != nil {
		r.t.Errorf("user %d: a page of 100 does not hold the whole feed: %d items and a next cursor", reader, len(page.Items))
	}
	ids := make([]int64, len(page.Items))
	for i, p := range page.Items {
		ids[i] = p.ID
	}
	r.hist.add(c, opInput{kind: opRead, user: reader}, call, opOutput{status: rec.Code, ids: ids})
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

// checkHistory checks the history against the model, a user at a time
// (porcupine's partitions: a user's reads and the statuses of their
// requests depend on the posts, reposts, their deletes and deliveries, the
// blocks, and whom that user follows and mutes).
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
	began := time.Now()
	res, info := porcupine.CheckOperationsVerbose(feedModel(), r.hist.ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations linearizable (checked in %v): %s", len(r.hist.ops), time.Since(began).Round(time.Millisecond), summarize(r.hist.ops))
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
		t.Errorf("the history is not linearizable: no order of its requests gives every status and read it got (drawn: %s)", path)
		m := feedModel()
		m.Partition = nil
		for _, part := range partitionByUser(r.hist.ops) {
			if porcupine.CheckOperations(m, part) {
				continue
			}
			explainStuck(t, part)
			if os.Getenv("NEWSFEED_MODEL_DUMP") != "" {
				r.dumpPosts(t)
				sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
				for _, op := range part {
					t.Logf("%8.2f %8.2f  %s", float64(op.Call)/1e6, float64(op.Return)/1e6, m.DescribeOperation(op.Input, op.Output))
				}
			}
			break
		}
	}
}

// explainStuck logs where the longest order of part (a partition that is
// not linearizable) that porcupine found stops: its last operations, the
// state they leave, and why none of the operations that could come next
// may (times in ms).
func explainStuck(t *testing.T, part []porcupine.Operation) {
	m := feedModel()
	m.Partition = nil
	_, info := porcupine.CheckOperationsVerbose(m, part, time.Minute)
	var longest []porcupine.Operation
	for _, lin := range info.PartialLinearizationsOperations()[0] {
		if len(lin) > len(longest) {
			longest = lin
		}
	}
	type opKey struct {
		client    int
		call, ret int64
	}
	done := map[opKey]bool{}
	s := feedState{rel: newRelationSet()}
	for i, op := range longest {
		done[opKey{op.ClientId, op.Call, op.Return}] = true
		_, s = s.step(op.Input.(opInput), op.Output.(opOutput))
		if i >= len(longest)-8 {
			t.Logf("linearized %8.2f %8.2f  %s", float64(op.Call)/1e6, float64(op.Return)/1e6, m.DescribeOperation(op.Input, op.Output))
		}
	}
	t.Logf("state: %s", m.DescribeState(s))
	var rest []porcupine.Operation
	for _, op := range part {
		if !done[opKey{op.ClientId, op.Call, op.Return}] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	firstReturn := int64(math.MaxInt64)
	for _, op := range rest {
		firstReturn = min(firstReturn, op.Return)
	}
	for _, op := range rest {
		if op.Call > firstReturn {
			break
		}
		in, out := op.Input.(opInput), op.Output.(opOutput)
		why := ""
		if in.kind == opRead {
			posts := s.truthPosts()
			why = ": " + explainFeed(in.user, posts, s.rel, out.ids, homeFeed(in.user, posts, s.rel, 0))
		}
		t.Logf("cannot go next %8.2f %8.2f  %s%s", float64(op.Call)/1e6, float64(op.Return)/1e6, m.DescribeOperation(in, out), why)
	}
}

// dumpPosts logs the round's posts and reposts as PostgreSQL holds them,
// and their events.
func (r *concurrentRound) dumpPosts(t *testing.T) {
	rows, err := r.pool.Query(context.Background(), `
SELECT p.id, p.author_id, COALESCE(p.repost_of, 0), p.deleted_at IS NOT NULL,
       COALESCE((SELECT string_agg(o.id || ' ' || o.event_type || ' ' || o.status, ', ' ORDER BY o.id) FROM outbox o
                 WHERE o.id > $2 AND (o.payload->>'post_id')::bigint = p.id), '')
FROM posts p WHERE p.author_id = ANY($1) ORDER BY p.id`, r.users, r.firstEvent)
	if err != nil {
		t.Error(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, author, of int64
		var deleted bool
		var events string
		if err := rows.Scan(&id, &author, &of, &deleted, &events); err != nil {
			t.Error(err)
			return
		}
		t.Logf("post %d by %d, repost of %d, deleted %v: %s", id, author, of, deleted, events)
	}
}

// summarize counts a history's operations by kind and status, and the
// reads that showed a repost: what the round exercised.
func summarize(ops []porcupine.Operation) string {
	names := map[opKind]string{opPost: "post", opRepost: "repost", opDelete: "delete", opFollow: "follow",
		opUnfollow: "unfollow", opMute: "mute", opUnmute: "unmute", opBlock: "block", opUnblock: "unblock",
		opRead: "read", opDelivered: "delivered"}
	counts := map[string]int{}
	reposts := map[int64]bool{}
	for _, op := range ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		if in.kind == opRepost && out.status == http.StatusCreated {
			reposts[out.post] = true
		}
	}
	for _, op := range ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		key := names[in.kind]
		if out.status != 0 && in.kind != opRead {
			key += " " + strconv.Itoa(out.status)
		}
		if in.kind == opRead && slices.ContainsFunc(out.ids, func(id int64) bool { return reposts[id] }) {
			counts["read showing a repost"]++
		}
		counts[key]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// checkQuiescent checks, once every event is delivered, that PostgreSQL
// holds the relations the model recorded, and pages through every feed to
// compare it with homeFeed of the model's record.
func (r *concurrentRound) checkQuiescent(t *testing.T) {
	posts, rel := r.record(t)
	for i, u := range r.users {
		want := homeFeed(u, posts, rel, 0)
		// Pages of 3 or 7: they cross from Redis to PostgreSQL past
		// feed.max_len at different entries.
		limit := []int{3, 7}[i%2]
		for pass := range 2 { // twice: a wrong feed stays wrong
			got := r.readFrom(t, u, limit, "", math.MaxInt)
			if !slices.Equal(got, want) {
				t.Errorf("user %d's feed, read %d times in pages of %d after every event was delivered, holds %v, want %v (%s): %s",
					u, pass+1, limit, got, want, describeRelations(u, r.users, rel), explainFeed(u, posts, rel, got, want))
				break
			}
		}
	}
}

// record is what the model recorded of the round's end: every post and
// repost, those deleted (a post's reposts with it), and the follows, mutes
// and blocks each request left. Where concurrent changes of one relation
// (a follow and an unfollow at once, say) may have left it either way,
// PostgreSQL's answer decides; everywhere else it must agree.
func (r *concurrentRound) record(t *testing.T) ([]truthPost, relationSet) {
	var posts []truthPost
	deleted := map[int64]bool{}
	// writes[relation] are the changes of one relation that answered
	// success: its value after each, and when each ran.
	type change struct {
		call, ret int64
		value     bool
	}
	writes := map[relationKey][]change{}
	set := func(k relationKey, op porcupine.Operation, v bool) {
		writes[k] = append(writes[k], change{op.Call, op.Return, v})
	}
	for _, op := range r.hist.ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		a, b := in.user, in.other
		switch {
		case in.kind == opPost:
			posts = append(posts, truthPost{id: out.post, author: in.user})
		case in.kind == opRepost && out.status == http.StatusCreated:
			posts = append(posts, truthPost{id: out.post, author: in.user, repostOf: out.orig})
		case in.kind == opDelete && out.status == http.StatusNoContent:
			deleted[in.post] = true
		case in.kind == opFollow && out.status == http.StatusNoContent:
			set(relationKey{"follow", a, b}, op, true)
		case in.kind == opUnfollow:
			set(relationKey{"follow", a, b}, op, false)
		case in.kind == opMute, in.kind == opUnmute:
			set(relationKey{"mute", a, b}, op, in.kind == opMute)
		case in.kind == opBlock:
			set(relationKey{"block", a, b}, op, true)
			set(relationKey{"follow", a, b}, op, false)
			set(relationKey{"follow", b, a}, op, false)
		case in.kind == opUnblock:
			set(relationKey{"block", a, b}, op, false)
		}
	}
	slices.SortFunc(posts, func(a, b truthPost) int { return cmp.Compare(a.id, b.id) })
	for i, p := range posts {
		posts[i].deleted = deleted[p.id] || deleted[p.repostOf]
	}
	inPostgres := r.relationsInPostgres(t)
	rel := newRelationSet()
	for k, ws := range writes {
		// The last change in some order of the requests is one that no
		// other change began after it returned.
		var last []bool
		for _, w := range ws {
			if !slices.ContainsFunc(ws, func(x change) bool { return x.call > w.ret }) {
				last = append(last, w.value)
			}
		}
		v := last[0]
		if slices.Contains(last, !v) {
			v = inPostgres[k] // either way: PostgreSQL's order decides
		}
		if inPostgres[k] != v {
			t.Errorf("PostgreSQL ended with %s %d → %d %v; the requests that changed it leave %v", k.kind, k.a, k.b, inPostgres[k], v)
		}
		if v {
			rel.relation(k.kind)[[2]int64{k.a, k.b}] = true
		}
	}
	for k, v := range inPostgres {
		if _, ok := writes[k]; !ok && v {
			t.Errorf("PostgreSQL ended with %s %d → %d, which no request made", k.kind, k.a, k.b)
		}
	}
	return posts, rel
}

// relationKey names one relation: a follows, mutes or blocks b.
type relationKey struct {
	kind string // "follow", "mute", "block"
	a, b int64
}

func (r relationSet) relation(kind string) map[[2]int64]bool {
	switch kind {
	case "follow":
		return r.follow
	case "mute":
		return r.mute
	default:
		return r.block
	}
}

// relationsInPostgres reads the follows, mutes and blocks of the round's
// users as PostgreSQL holds them.
func (r *concurrentRound) relationsInPostgres(t *testing.T) map[relationKey]bool {
	rows, err := r.pool.Query(context.Background(), `
SELECT 'follow', follower_id, followee_id FROM follows WHERE follower_id = ANY($1) OR followee_id = ANY($1)
UNION ALL SELECT 'mute', user_id, muted_id FROM mutes WHERE user_id = ANY($1) OR muted_id = ANY($1)
UNION ALL SELECT 'block', blocker_id, blocked_id FROM blocks WHERE blocker_id = ANY($1) OR blocked_id = ANY($1)`, r.users)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[relationKey]bool{}
	for rows.Next() {
		var k relationKey
		if err := rows.Scan(&k.kind, &k.a, &k.b); err != nil {
			t.Fatal(err)
		}
		out[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// describeRelations says whom u follows, mutes and blocks, and who blocks u.
func describeRelations(u int64, users []int64, rel relationSet) string {
	var f, m, b, by []int64
	for _, v := range users {
		if rel.follows(u, v) {
			f = append(f, v)
		}
		if rel.mutes(u, v) {
			m = append(m, v)
		}
		if rel.blocks(u, v) {
			b = append(b, v)
		}
		if rel.blocks(v, u) {
			by = append(by, v)
		}
	}
	return fmt.Sprintf("follows %v, mutes %v, blocks %v, blocked by %v", f, m, b, by)
}

// feedState is the model's state for one user's partition: every post and
// repost (ascending ids), every block, and the user's follows and mutes.
type feedState struct {
	posts []modelPostState
	rel   relationSet
}

type modelPostState struct {
	truthPost
	delivered bool
}

func (s feedState) with(f func(*feedState)) feedState {
	c := feedState{posts: slices.Clone(s.posts), rel: relationSet{
		follow: maps.Clone(s.rel.follow), mute: maps.Clone(s.rel.mute), block: maps.Clone(s.rel.block),
	}}
	f(&c)
	return c
}

// find returns the index of post id, or -1.
func (s feedState) find(id int64) int {
	i := sort.Search(len(s.posts), func(i int) bool { return s.posts[i].id >= id })
	if i == len(s.posts) || s.posts[i].id != id {
		return -1
	}
	return i
}

func (s feedState) insert(p truthPost) feedState {
	return s.with(func(c *feedState) {
		i := sort.Search(len(c.posts), func(i int) bool { return c.posts[i].id >= p.id })
		c.posts = slices.Insert(c.posts, i, modelPostState{truthPost: p})
	})
}

func (s feedState) truthPosts() []truthPost {
	out := make([]truthPost, len(s.posts))
	for i, p := range s.posts {
		out[i] = p.truthPost
	}
	return out
}

// step is the contract, as porcupine checks it: whether the operation may
// answer what it answered in state s, and the state after it.
func (s feedState) step(in opInput, out opOutput) (bool, feedState) {
	switch in.kind {
	case opPost:
		return out.status == http.StatusCreated, s.insert(truthPost{id: out.post, author: in.user})
	case opRepost:
		i := s.find(in.post)
		if i < 0 {
			return false, s // not created yet: linearize the create first
		}
		target, orig := s.posts[i].truthPost, s.posts[i].truthPost
		if target.repostOf != 0 {
			orig = s.posts[s.find(target.repostOf)].truthPost
		}
		want, first := http.StatusCreated, int64(0)
		for _, p := range s.posts {
			if p.author == in.user && p.repostOf == orig.id && !p.deleted {
				want, first = http.StatusOK, p.id
			}
		}
		switch {
		case target.deleted:
			want = http.StatusNotFound
		case s.rel.blocked(in.user, target.author) || s.rel.blocked(in.user, orig.author) ||
			s.rel.mutes(in.user, target.author) || s.rel.mutes(in.user, orig.author): // hidden
			want = http.StatusNotFound
		case orig.author == in.user:
			want = http.StatusUnprocessableEntity
		}
		switch {
		case out.status != want:
			return false, s
		case want == http.StatusOK:
			return out.post == first && out.orig == orig.id, s
		case want == http.StatusCreated:
			return out.orig == orig.id && s.find(out.post) < 0, s.insert(truthPost{id: out.post, author: in.user, repostOf: orig.id})
		}
		return true, s
	case opDelete, opDelivered:
		i := s.find(in.post)
		if i < 0 {
			return false, s // not created yet: linearize the create first
		}
		if in.kind == opDelivered {
			return true, s.with(func(c *feedState) { c.posts[i].delivered = true })
		}
		want := http.StatusNoContent
		switch {
		case s.posts[i].deleted:
			want = http.StatusNotFound
		case s.posts[i].author != in.user:
			want = http.StatusForbidden
		}
		if out.status != want {
			return false, s
		}
		if want != http.StatusNoContent {
			return true, s
		}
		return true, s.with(func(c *feedState) {
			for j, p := range c.posts {
				if p.id == in.post || p.repostOf == in.post { // a post takes its reposts with it
					c.posts[j].deleted = true
				}
			}
		})
	case opFollow:
		if s.rel.blocked(in.user, in.other) {
			return out.status == http.StatusForbidden, s
		}
		return out.status == http.StatusNoContent, s.with(func(c *feedState) { setRelation(c.rel.follow, in.user, in.other, true) })
	case opUnfollow, opMute, opUnmute, opBlock, opUnblock:
		return out.status == http.StatusNoContent, s.with(func(c *feedState) {
			switch in.kind {
			case opUnfollow:
				setRelation(c.rel.follow, in.user, in.other, false)
			case opMute, opUnmute:
				setRelation(c.rel.mute, in.user, in.other, in.kind == opMute)
			default:
				setRelation(c.rel.block, in.user, in.other, in.kind == opBlock)
				if in.kind == opBlock { // a block removes the follows, both ways
					setRelation(c.rel.follow, in.user, in.other, false)
					setRelation(c.rel.follow, in.other, in.user, false)
				}
			}
		})
	case opRead:
		// Nothing but the feed's entries; every one of them that is the
		// reader's own or whose fan-out finished.
		want := homeFeed(in.user, s.truthPosts(), s.rel, 0)
		shown := make(map[int64]bool, len(out.ids))
		for _, id := range out.ids {
			shown[id] = true
		}
		for _, id := range want {
			delete(shown, id)
		}
		if len(shown) > 0 {
			return false, s // shows what it must not
		}
		for _, id := range out.ids {
			shown[id] = true
		}
		for _, id := range want {
			if p := s.posts[s.find(id)]; !shown[id] && (p.delivered || p.author == in.user) {
				return false, s
			}
		}
		return true, s
	}
	return false, s
}

// feedModel is the contract, as porcupine checks it.
func feedModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByUser,
		Init:      func() any { return feedState{rel: newRelationSet()} },
		Step: func(state, input, output any) (bool, any) {
			return state.(feedState).step(input.(opInput), output.(opOutput))
		},
		Equal: func(a, b any) bool {
			x, y := a.(feedState), b.(feedState)
			return slices.Equal(x.posts, y.posts) && maps.Equal(x.rel.follow, y.rel.follow) &&
				maps.Equal(x.rel.mute, y.rel.mute) && maps.Equal(x.rel.block, y.rel.block)
		},
		Hash: func(state any) uint64 {
			s := state.(feedState)
			h := fnv.New64a()
			for _, p := range s.posts {
				fmt.Fprintf(h, "%d/%d/%d/%t/%t;", p.id, p.author, p.repostOf, p.deleted, p.delivered)
			}
			for _, r := range []map[[2]int64]bool{s.rel.follow, s.rel.mute, s.rel.block} {
				keys := slices.SortedFunc(maps.Keys(r), func(a, b [2]int64) int {
					return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
				})
				fmt.Fprintf(h, "%v|", keys)
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(opInput), output.(opOutput)
			switch in.kind {
			case opPost:
				return fmt.Sprintf("post by %d → %d", in.user, out.post)
			case opRepost:
				return fmt.Sprintf("%d reposts %d → %d (%d of %d)", in.user, in.post, out.status, out.post, out.orig)
			case opDelete:
				return fmt.Sprintf("%d deletes %d → %d", in.user, in.post, out.status)
			case opDelivered:
				return fmt.Sprintf("delivered %d", in.post)
			case opFollow, opUnfollow, opMute, opUnmute, opBlock, opUnblock:
				verb := map[opKind]string{opFollow: "follows", opUnfollow: "unfollows", opMute: "mutes",
					opUnmute: "unmutes", opBlock: "blocks", opUnblock: "unblocks"}[in.kind]
				return fmt.Sprintf("%d %s %d → %d", in.user, verb, in.other, out.status)
			default:
				return fmt.Sprintf("%d reads %v", in.user, out.ids)
			}
		},
		DescribeState: func(state any) string {
			s := state.(feedState)
			return fmt.Sprintf("follows %v, mutes %v, blocks %v, posts %v",
				slices.Collect(maps.Keys(s.rel.follow)), slices.Collect(maps.Keys(s.rel.mute)),
				slices.Collect(maps.Keys(s.rel.block)), s.posts)
		},
	}
}

// partitionByUser splits a history into one per user: every post, repost,
// delete, delivery, block, unblock, mute and unmute (a repost's status
// depends on the blocks between any two users and on the reposter's
// mutes), and the user's follows and reads.
func partitionByUser(ops []porcupine.Operation) [][]porcupine.Operation {
	users := map[int64]bool{}
	for _, op := range ops {
		if in := op.Input.(opInput); in.kind != opDelivered {
			users[in.user] = true
		}
	}
	var out [][]porcupine.Operation
	for u := range users {
		var part []porcupine.Operation
		for _, op := range ops {
			switch in := op.Input.(opInput); in.kind {
			case opPost, opRepost, opDelete, opDelivered, opBlock, opUnblock, opMute, opUnmute:
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
