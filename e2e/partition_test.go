package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

// The network-fault tests: Toxiproxy, run in this test process on loopback,
// stands between the processes under test and PostgreSQL or Redis, and
// breaks the network the ways a cloud does — a silent partition (the
// `timeout` toxic with timeout 0: connections stay open, nothing comes
// back), latency with jitter, connections reset — while clients post and
// read. Each test holds the answers to their bounds (API.md: within
// http.request_timeout; feed reads within 2 s while Redis is silent), allows
// no 5xx but 503, finds no half-written post, and, once the fault heals,
// every accepted post in every follower's feed exactly once.

// toxiServer owns the proxies of every test in this process; its HTTP API
// is never started: the tests add and remove toxics in-process.
var toxiServer = sync.OnceValue(func() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
})

// faultProxy is one Toxiproxy proxy in front of a server.
type faultProxy struct {
	t     *testing.T
	name  string
	proxy *toxiproxy.Proxy
	addr  string
}

// newFaultProxy starts a proxy on a free loopback port in front of upstream
// (host:port); the test's cleanup stops it.
func newFaultProxy(t *testing.T, name, upstream string) *faultProxy {
	t.Helper()
	p := toxiproxy.NewProxy(toxiServer(), t.Name()+"/"+name, "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &faultProxy{t: t, name: name, proxy: p, addr: p.Listen}
}

// add puts a toxic of type kind with attrs on both directions of the proxy.
func (p *faultProxy) add(kind string, attrs map[string]int64) {
	p.t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		b, err := json.Marshal(map[string]any{
			"name": kind + "_" + stream, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs,
		})
		require.NoError(p.t, err)
		_, err = p.proxy.Toxics.AddToxicJson(bytes.NewReader(b))
		require.NoError(p.t, err)
	}
	p.t.Logf("%s %s: %s %v", time.Now().Format("15:04:05.000"), p.name, kind, attrs)
}

// heal removes every toxic: the connections that a blackhole held are
// closed (Toxiproxy closes them), new ones go through.
func (p *faultProxy) heal() {
	p.proxy.Toxics.ResetToxics(context.Background())
	p.t.Logf("%s %s: healed", time.Now().Format("15:04:05.000"), p.name)
}

// blackhole makes the proxy a silent partition: connections are accepted
// and stay open, and nothing goes through either way.
func (p *faultProxy) blackhole() { p.add("timeout", map[string]int64{"timeout": 0}) }

// partitioned is a deployment whose every process reaches PostgreSQL and
// Redis through a fault proxy each.
type partitioned struct {
	*cluster
	pg, rd    *faultProxy
	serve     *proc
	authors   []int64
	followers []int64
}

// Every author is followed by every follower, whose feeds are built.
const partitionAuthors, partitionFollowers = 3, 20

// newPartitioned starts serve, dispatch and work behind the proxies, with
// env added to the defaults. What the fault cut mid-way is taken up again
// sooner than by default, since the test waits for delivery after the
// fault: retries of failed events, a ticket whose delivery to the worker
// was lost (it waits in the stream's pending list for queue.claim_idle),
// and a batch of outbox rows whose pass failed after its claim (claimed
// until outbox.lease ends). The rate limiter is on: its Redis call is on
// the path of every post.
func newPartitioned(t *testing.T, env ...string) *partitioned {
	t.Helper()
	env = append([]string{
		"NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_BACKOFF_MAX=1s", "NEWSFEED_QUEUE_CLAIM_IDLE=3s",
		"NEWSFEED_OUTBOX_LEASE=5s",
		"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=100000", "NEWSFEED_RATELIMIT_FOLLOWS_PER_MINUTE=100000",
	}, env...)
	c := newCluster(t, withEnv(env...))
	c.skipOnCluster("a proxy in front of one Redis; a cluster client would reach the nodes directly")
	dbURL, err := url.Parse(c.dbURL)
	require.NoError(t, err)
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	f := &partitioned{cluster: c, pg: newFaultProxy(t, "PostgreSQL", dbURL.Host), rd: newFaultProxy(t, "Redis", redisURL.Host)}
	dbURL.Host, redisURL.Host = f.pg.addr, f.rd.addr
	c.env = append(c.env, "NEWSFEED_DATABASE_URL="+dbURL.String(), "NEWSFEED_REDIS_URL="+redisURL.String())
	for a := range partitionAuthors {
		f.authors = append(f.authors, int64(a+1))
		f.followers = c.seedFollowers(int64(a+1), 100, partitionFollowers)
	}
	c.markFeedsBuilt(f.followers)
	f.serve = c.start("serve")
	c.start("dispatch")
	c.start("work")
	return f
}

// answer is one request of the traffic and how it went.
type answer struct {
	what   string // "post" or "feed"
	at     time.Time
	took   time.Duration
	status int // 0: no answer
	err    error
}

// traffic is clients posting (every author) and reading their feeds (every
// follower in turn) until stopped. A post that is not accepted is sent
// again with the same Idempotency-Key, as a client does, until it is.
type traffic struct {
	f    *partitioned
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	answers []answer
}

// Pacing of the traffic: a few posts and reads a second per client, so that
// a run stays below feed.max_len posts and below every rate.
const postEvery, readers, readEvery = 150 * time.Millisecond, 4, 50 * time.Millisecond

func (f *partitioned) startTraffic() *traffic {
	tr := &traffic{f: f, stop: make(chan struct{})}
	for _, a := range f.authors {
		tr.wg.Go(func() { tr.post(f.serve.client(a)) })
	}
	for r := range readers {
		tr.wg.Go(func() { tr.read(r) })
	}
	return tr
}

func (tr *traffic) record(a answer) {
	tr.mu.Lock()
	tr.answers = append(tr.answers, a)
	tr.mu.Unlock()
}

// stopped reports whether the traffic is to stop, after waiting d.
func (tr *traffic) stopped(d time.Duration) bool {
	select {
	case <-tr.stop:
		return true
	case <-time.After(d):
		return false
	}
}

// post posts as cl until stopped.
func (tr *traffic) post(cl *client) {
	cl.http.Timeout = time.Minute // the test measures the waits; it does not cut them
	for n := 0; !tr.stopped(postEvery); n++ {
		key := tr.f.t.Name() + "-" + strconv.Itoa(n)
		for {
			start := time.Now()
			status, _, _ := cl.tryPostStatus("post "+key, key)
			tr.record(answer{what: "post", at: start, took: time.Since(start), status: status})
			if status == http.StatusCreated || status == http.StatusOK || tr.stopped(50*time.Millisecond) {
				break
			}
		}
	}
}

// read reads first pages of the followers' feeds, reader r's share of them
// in turn, until stopped.
func (tr *traffic) read(r int) {
	var clients []*client
	for i := r; i < len(tr.f.followers); i += readers {
		cl := tr.f.serve.client(tr.f.followers[i])
		cl.http.Timeout = time.Minute
		clients = append(clients, cl)
	}
	for n := 0; !tr.stopped(readEvery); n++ {
		cl := clients[n%len(clients)]
		req, err := http.NewRequest(http.MethodGet, cl.base+"/v1/feed?limit=20", nil)
		if err != nil {
			tr.f.t.Errorf("GET /v1/feed: %v", err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+cl.token)
		start := time.Now()
		resp, body, err := roundTrip(cl.http, req)
		a := answer{what: "feed", at: start, took: time.Since(start), err: err}
		if err == nil {
			a.status = resp.StatusCode
			checkDescribed(tr.f.t, req, nil, resp, body)
		}
		tr.record(a)
	}
}

// end stops the traffic and returns every answer.
func (tr *traffic) end() []answer {
	close(tr.stop)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.answers)
}

// bound is what a test allows of the answers to one kind of request.
type bound struct {
	what     string
	within   time.Duration
	statuses []int
}

// check holds every answer to its kind's bound, and logs the slowest of
// each kind, and how many answered each status.
func check(t *testing.T, answers []answer, bounds ...bound) {
	t.Helper()
	for _, b := range bounds {
		var slowest time.Duration
		statuses := map[int]int{}
		n := 0
		for _, a := range answers {
			if a.what != b.what {
				continue
			}
			n++
			slowest = max(slowest, a.took)
			statuses[a.status]++
			if a.err != nil {
				t.Errorf("%s at %s: no answer after %s: %v", a.what, a.at.Format("15:04:05.000"), a.took, a.err)
				continue
			}
			if !slices.Contains(b.statuses, a.status) {
				t.Errorf("%s at %s answered %d after %s; allowed: %v", a.what, a.at.Format("15:04:05.000"), a.status, a.took, b.statuses)
			}
			if a.took > b.within {
				t.Errorf("%s at %s answered %d after %s, over %s", a.what, a.at.Format("15:04:05.000"), a.status, a.took.Round(time.Millisecond), b.within)
			}
		}
		require.Positive(t, n, "no %s requests were made", b.what)
		t.Logf("%d %s requests, slowest %s, by status %v", n, b.what, slowest.Round(time.Millisecond), statuses)
	}
}

// readyzTurns503Within fails the test unless serve's /readyz answers 503 within d.
func (f *partitioned) readyzTurns503Within(d time.Duration) {
	f.t.Helper()
	start := time.Now()
	for {
		status := readyz(f.t, f.serve.metricsAddr)
		if status == http.StatusServiceUnavailable {
			f.t.Logf("/readyz answered 503 %s after the fault began", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > d {
			f.t.Fatalf("/readyz still answers %d %s after the fault began", status, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkDelivered waits until the outbox is drained and checks that every
// post in PostgreSQL has its event (nothing half-written) and is in every
// follower's feed, and that feeds hold nothing else; through the API, for
// some followers, every post once.
func (f *partitioned) checkDelivered() {
	f.t.Helper()
	ctx := context.Background()
	var halfWritten int
	require.NoError(f.t, f.pool.QueryRow(ctx, `SELECT count(*) FROM posts p WHERE NOT EXISTS (
		SELECT 1 FROM outbox o WHERE o.event_type = 'post.created' AND (o.payload->>'post_id')::bigint = p.id)`).Scan(&halfWritten))
	require.Zero(f.t, halfWritten, "posts without their delivery event")
	start := time.Now()
	f.waitOutboxDrained(60 * time.Second)
	f.t.Logf("outbox drained %s after the traffic stopped", time.Since(start).Round(time.Millisecond))
	want := f.queryInts("SELECT id FROM posts WHERE deleted_at IS NULL ORDER BY id")
	require.NotEmpty(f.t, want)
	require.Less(f.t, len(want), feed.DefaultMaxLen, "the check reads whole feeds: fewer posts than a feed keeps")
	feeds, err := feed.InspectMany(ctx, f.redis(), f.prefix, f.followers)
	require.NoError(f.t, err)
	for i, stored := range feeds {
		require.Equal(f.t, want, stored.IDs, "follower %d's feed holds every post once", f.followers[i])
	}
	for _, follower := range []int64{f.followers[0], f.followers[len(f.followers)-1]} {
		var got []int64
		for _, p := range f.serve.client(follower).feed() {
			got = append(got, p.ID)
		}
		slices.Reverse(got)
		require.Equal(f.t, want, got, "follower %d's feed through the API: every post once, newest first", follower)
	}
	f.t.Logf("%d posts delivered to each of %d followers exactly once", len(want), len(f.followers))
}

// TestRedisSilent: Redis stops answering for 15 s (a silent partition)
// under traffic. Feed reads are served from PostgreSQL, none over 2 s;
// posts are unaffected (201); /readyz turns 503 within 2 s; after the
// partition heals every post reaches every follower exactly once.
func TestRedisSilent(t *testing.T) {
	t.Parallel()
	f := newPartitioned(t)
	tr := f.startTraffic()
	time.Sleep(2 * time.Second)
	f.rd.blackhole()
	silent := time.Now()
	f.readyzTurns503Within(2 * time.Second)
	time.Sleep(15*time.Second - time.Since(silent))
	f.rd.heal()
	time.Sleep(3 * time.Second)
	answers := tr.end()
	check(t, answers,
		bound{what: "feed", within: 2 * time.Second, statuses: []int{http.StatusOK}},
		bound{what: "post", within: 2 * time.Second, statuses: []int{http.StatusCreated}})
	f.checkDelivered()
}

// TestPostgresSilent: PostgreSQL stops answering for 8 s under traffic,
// with http.request_timeout 2s. Every request is answered within 3 s
// (http.request_timeout + 1 s): a post 201 or 503, a feed read 200 or 503;
// /readyz turns 503 within 2 s; nothing is half-written, and after the
// partition heals every accepted post — and any post whose commit landed
// though its answer was a 503 — reaches every follower exactly once.
func TestPostgresSilent(t *testing.T) {
	t.Parallel()
	f := newPartitioned(t, "NEWSFEED_HTTP_REQUEST_TIMEOUT=2s")
	tr := f.startTraffic()
	time.Sleep(2 * time.Second)
	f.pg.blackhole()
	silent := time.Now()
	f.readyzTurns503Within(2 * time.Second)
	time.Sleep(8*time.Second - time.Since(silent))
	f.pg.heal()
	time.Sleep(3 * time.Second)
	answers := tr.end()
	check(t, answers,
		bound{what: "feed", within: 3 * time.Second, statuses: []int{http.StatusOK, http.StatusServiceUnavailable}},
		bound{what: "post", within: 3 * time.Second, statuses: []int{http.StatusCreated, http.StatusOK, http.StatusServiceUnavailable}})
	requireSome(t, answers, "post", http.StatusServiceUnavailable)
	f.checkDelivered()
}

// TestSlowNetwork: PostgreSQL and Redis answer late — 100 ms ± 100 ms each
// way on Redis, 30 ms ± 30 ms on PostgreSQL — for 6 s under traffic, with
// http.request_timeout 2s. Every answer comes within it (+ 1 s for a loaded
// machine), no 5xx but 503; every post reaches every follower exactly once.
func TestSlowNetwork(t *testing.T) {
	t.Parallel()
	f := newPartitioned(t, "NEWSFEED_HTTP_REQUEST_TIMEOUT=2s")
	tr := f.startTraffic()
	time.Sleep(time.Second)
	f.rd.add("latency", map[string]int64{"latency": 100, "jitter": 100})
	f.pg.add("latency", map[string]int64{"latency": 30, "jitter": 30})
	time.Sleep(6 * time.Second)
	f.rd.heal()
	f.pg.heal()
	time.Sleep(2 * time.Second)
	answers := tr.end()
	check(t, answers,
		bound{what: "feed", within: 3 * time.Second, statuses: []int{http.StatusOK, http.StatusServiceUnavailable}},
		bound{what: "post", within: 3 * time.Second, statuses: []int{http.StatusCreated, http.StatusOK, http.StatusServiceUnavailable}})
	f.checkDelivered()
}

// TestConnectionsReset: every connection to Redis, then to PostgreSQL too,
// is reset as soon as data flows, for 4 s under traffic, with
// http.request_timeout 2s: every request is answered within it (+ 1 s for a
// loaded machine) — 503 where it needs what is gone, feed reads from
// PostgreSQL while only Redis resets — and once it stops every post reaches
// every follower exactly once.
func TestConnectionsReset(t *testing.T) {
	t.Parallel()
	f := newPartitioned(t, "NEWSFEED_HTTP_REQUEST_TIMEOUT=2s")
	tr := f.startTraffic()
	time.Sleep(time.Second)
	f.rd.add("reset_peer", map[string]int64{"timeout": 0})
	time.Sleep(2 * time.Second)
	f.pg.add("reset_peer", map[string]int64{"timeout": 0})
	time.Sleep(2 * time.Second)
	f.rd.heal()
	f.pg.heal()
	time.Sleep(2 * time.Second)
	answers := tr.end()
	check(t, answers,
		bound{what: "feed", within: 3 * time.Second, statuses: []int{http.StatusOK, http.StatusServiceUnavailable}},
		bound{what: "post", within: 3 * time.Second, statuses: []int{http.StatusCreated, http.StatusOK, http.StatusServiceUnavailable}})
	requireSome(t, answers, "post", http.StatusServiceUnavailable)
	f.checkDelivered()
}

// requireSome fails the test unless some request of kind what answered
// status: the fault was felt.
func requireSome(t *testing.T, answers []answer, what string, status int) {
	t.Helper()
	for _, a := range answers {
		if a.what == what && a.status == status {
			return
		}
	}
	require.Failf(t, "the fault was not felt", "no %s request answered %d", what, status)
}
