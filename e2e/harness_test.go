// Package e2e drives the built newsfeed binary as child processes against the
// real PostgreSQL and Redis, the way an operator runs it, and checks the
// guarantees of API.md from outside: through the HTTP API, /metrics and the
// database, never through log lines.
package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/openapitest"
	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

var binary string

// quietRedis drops go-redis's own log lines (a dial that failed while a
// test's Redis is down on purpose); every error also reaches the caller.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	dir, err := os.MkdirTemp("", "newsfeed-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "newsfeed")
	// The binary is built as the tests are: with the race detector in make
	// test's race pass, and without in its Redis Cluster pass, where a
	// race-checked binary would make the load tests several times slower.
	args := []string{"build", "-o", binary}
	if raceDetector {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "..")...)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build newsfeed:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const secret = "e2e-secret"

// cluster is one deployment under test: its own database, its own Redis key
// prefix (or database), and the processes started on it.
type cluster struct {
	t     *testing.T
	dbURL string
	// readURL is database.read_url of every process: the test's database on
	// the replica of NEWSFEED_TEST_REPLICA_URL, or empty without one.
	readURL  string
	redisURL string
	// onCluster: redisURL names the Redis Cluster of
	// NEWSFEED_TEST_REDIS_CLUSTER_URL, which every process is pointed at.
	onCluster bool
	prefix    string
	pool      *pgxpool.Pool
	env       []string
	mu        sync.Mutex
	procs     []*proc
}

type clusterOption func(*cluster)

// withOwnRedisDB gives the cluster a whole Redis database (for FLUSHDB tests).
func withOwnRedisDB() clusterOption {
	return func(c *cluster) { c.redisURL, c.prefix, c.onCluster = testenv.NewRedisDB(c.t), "nf:", false }
}

// withEnv adds configuration for every process of the cluster.
func withEnv(kv ...string) clusterOption {
	return func(c *cluster) { c.env = append(c.env, kv...) }
}

func newCluster(t *testing.T, opts ...clusterOption) *cluster {
	t.Helper()
	c := &cluster{t: t, dbURL: testenv.NewDatabaseURL(t)}
	// On the Redis Cluster when the environment names one, else one Redis.
	_, prefix, onCluster := testenv.NewUniversalRedis(t)
	c.redisURL, c.prefix, c.onCluster = testenv.RedisURL(), prefix, onCluster
	if onCluster {
		c.redisURL = testenv.RedisClusterURL()
	}
	c.env = []string{
		"NEWSFEED_AUTH_SECRET=" + secret,
		"NEWSFEED_OUTBOX_POLL_INTERVAL=100ms",
		"NEWSFEED_LOG_LEVEL=warn",
		// Tests post and follow in bulk; those about limits set their own.
		"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0",
		"NEWSFEED_RATELIMIT_FOLLOWS_PER_MINUTE=0",
		// No load balancer to wait for: SIGTERM stops at once, except in
		// the test of the drain.
		"NEWSFEED_SHUTDOWN_DRAIN=0s",
	}
	for _, o := range opts {
		o(c)
	}
	if testenv.ReplicaURL() != "" {
		// Listings read the replica, which may lag on purpose (make test
		// runs the cluster pass with recovery_min_apply_delay 2s): every
		// guarantee must hold with it.
		c.readURL = testenv.ReplicaDatabaseURL(t, c.dbURL)
		c.env = append(c.env, "NEWSFEED_DATABASE_READ_URL="+c.readURL)
	}
	c.env = append(c.env,
		"NEWSFEED_DATABASE_URL="+c.dbURL,
		"NEWSFEED_REDIS_URL="+c.redisURL,
		"NEWSFEED_REDIS_CLUSTER="+strconv.FormatBool(c.onCluster),
		"NEWSFEED_REDIS_PREFIX="+c.prefix,
	)
	c.pool = testenv.Pool(t, c.dbURL)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			p.kill()
		}
	})
	return c
}

// proc is one running newsfeed process.
type proc struct {
	t           *testing.T
	role        string
	name        string // of its connections, if started by startNamed
	cmd         *exec.Cmd
	httpAddr    string
	metricsAddr string
	stderr      *lockedWriter
	done        chan struct{}
	exitErr     error
}

// start runs `newsfeed <role> args...` and waits until it is healthy.
func (c *cluster) start(role string, args ...string) *proc {
	c.t.Helper()
	return c.startWith(role, nil, args...)
}

// startWith is start with extra environment for this process alone (it wins
// over the cluster's).
func (c *cluster) startWith(role string, extra []string, args ...string) *proc {
	c.t.Helper()
	metricsAddr, err := probe.FreeAddr()
	require.NoError(c.t, err)
	p := &proc{t: c.t, role: role, metricsAddr: metricsAddr, stderr: &lockedWriter{}, done: make(chan struct{})}
	env := append(append(hostEnv(), c.env...), extra...)
	env = append(env, "NEWSFEED_METRICS_ADDR="+p.metricsAddr)
	if role == "serve" || role == "all" {
		p.httpAddr, err = probe.FreeAddr()
		require.NoError(c.t, err)
		env = append(env, "NEWSFEED_HTTP_ADDR="+p.httpAddr)
	}
	p.cmd = exec.Command(binary, append([]string{role}, args...)...)
	p.cmd.Env = env
	p.cmd.Dir = c.t.TempDir() // no config.yaml there: env and defaults only
	p.cmd.Stderr = p.stderr
	require.NoError(c.t, p.cmd.Start())
	go func() { p.exitErr = p.cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("stderr of %s (pid %d):\n%s", role, p.cmd.Process.Pid, p.output())
		}
	})
	p.waitHealthy()
	return p
}

// lockedWriter is a process's stderr, read while the process may still write.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (p *proc) output() string { return p.stderr.String() }

func (p *proc) waitHealthy() {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a process that exits stops the wait
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := probe.WaitHealthy(ctx, "http://"+p.metricsAddr); err == nil {
		return
	}
	select {
	case <-p.done:
		p.t.Fatalf("%s exited early: %v\n%s", p.role, p.exitErr, p.output())
	default:
	}
	p.t.Fatalf("%s did not become healthy\n%s", p.role, p.output())
}

// kill ends the process with SIGKILL: no chance to clean up.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop() int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.kill()
		p.t.Fatalf("%s did not stop within 60s of SIGTERM", p.role)
	}
	return p.cmd.ProcessState.ExitCode()
}

// metric reads one unlabelled sample from the process's /metrics (its
// answer checked against docs/openapi.yaml like every other).
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	status, body, err := opsGet(p.t, p.metricsAddr, "/metrics")
	require.NoError(p.t, err)
	require.Equal(p.t, http.StatusOK, status, "GET /metrics of %s", p.role)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(p.t, err)
			return f
		}
	}
	p.t.Fatalf("metric %s not exported by %s", name, p.role)
	return 0
}

// opsGet sends GET path (/healthz, /readyz, /metrics) to addr, an API or a
// metrics address, and returns the status and body of the answer, checked
// against docs/openapi.yaml (checkDescribed: drift is reported with
// t.Errorf, so it may run on any goroutine — require.Eventually runs its
// condition on one of its own). A transport error (refused, cut short) is
// returned: a caller of a process that may have stopped expects one.
func opsGet(t testing.TB, addr, path string) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, body, err := roundTrip(opsHTTP, req)
	if err != nil {
		return 0, nil, err
	}
	checkDescribed(t, req, nil, resp, body)
	return resp.StatusCode, body, nil
}

// opsHTTP is the client of opsGet: a probe that hangs is a failure.
var opsHTTP = &http.Client{Timeout: 30 * time.Second}

// readyz returns the status of GET /readyz on addr, checked against
// docs/openapi.yaml; no answer at all is reported with t.Errorf (any
// goroutine) and returns 0.
func readyz(t testing.TB, addr string) int {
	t.Helper()
	status, _, err := opsGet(t, addr, "/readyz")
	if err != nil {
		t.Errorf("GET /readyz on %s: %v", addr, err)
		return 0
	}
	return status
}

// roundTrip sends req and reads the whole answer. An answer cut short is a
// transport error, like none at all.
func roundTrip(hc *http.Client, req *http.Request) (*http.Response, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL, err)
	}
	return resp, body, nil
}

// client calls the API of one serve/all process as one user.
type client struct {
	t     testing.TB
	base  string
	token string
	http  *http.Client
}

func (p *proc) client(userID int64) *client {
	token, err := api.IssueToken([]byte(secret), userID, time.Hour)
	require.NoError(p.t, err)
	return &client{t: p.t, base: "http://" + p.httpAddr, token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

func (c *client) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var sent []byte
	if body != nil {
		var err error
		sent, err = json.Marshal(body)
		require.NoError(c.t, err)
	}
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(sent))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, out, err := roundTrip(c.http, req)
	require.NoError(c.t, err)
	requireDescribed(c.t, req, sent, resp, out)
	return resp.StatusCode, out
}

// get sends GET url with the given header (name, value pairs) and returns
// the response, its body read, checked against docs/openapi.yaml.
func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	requireDescribed(t, req, nil, resp, body)
	return resp, body
}

// requireDescribed fails the test when docs/openapi.yaml does not allow an
// answer of the API (see internal/openapitest), saying what drifted. It
// stops the test: call it on the test's goroutine, checkDescribed on others.
func requireDescribed(t testing.TB, req *http.Request, sent []byte, resp *http.Response, body []byte) {
	t.Helper()
	if !checkDescribed(t, req, sent, resp, body) {
		t.FailNow()
	}
}

// checkDescribed is requireDescribed for any goroutine: drift is reported
// with t.Errorf (which is safe from any goroutine, where t.FailNow is not),
// and it returns whether the answer is described.
func checkDescribed(t testing.TB, req *http.Request, sent []byte, resp *http.Response, body []byte) bool {
	t.Helper()
	if err := describedErr(req, sent, resp, body); err != nil {
		t.Errorf("%v", err)
		return false
	}
	return true
}

// describedErr says how docs/openapi.yaml disagrees with an answer of the
// API, or returns nil.
func describedErr(req *http.Request, sent []byte, resp *http.Response, body []byte) error {
	spec, err := openapitest.Load()
	if err != nil {
		return err
	}
	return spec.Check(openapitest.Exchange{
		Request: req, RequestBody: sent, Status: resp.StatusCode, Header: resp.Header, Body: body,
	})
}

type post struct {
	ID       int64  `json:"id"`
	AuthorID int64  `json:"author_id"`
	Body     string `json:"body"`
	// RepostOf is the original of a repost, nil for a post.
	RepostOf *post `json:"repost_of"`
}

type postPage struct {
	Items      []post  `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func (c *client) post(body string) post {
	c.t.Helper()
	status, out := c.do("POST", "/v1/posts", map[string]string{"body": body})
	require.Equal(c.t, http.StatusCreated, status, string(out))
	var p post
	require.NoError(c.t, json.Unmarshal(out, &p))
	return p
}

func (c *client) follow(userID int64) {
	c.t.Helper()
	status, out := c.do("PUT", "/v1/following/"+strconv.FormatInt(userID, 10), nil)
	require.Equal(c.t, http.StatusNoContent, status, string(out))
}

// feed reads the whole home feed, following cursors.
func (c *client) feed() []post {
	c.t.Helper()
	var all []post
	path := "/v1/feed?limit=100"
	for {
		status, out := c.do("GET", path, nil)
		require.Equal(c.t, http.StatusOK, status, string(out))
		var pg postPage
		require.NoError(c.t, json.Unmarshal(out, &pg))
		all = append(all, pg.Items...)
		if pg.NextCursor == nil {
			return all
		}
		path = "/v1/feed?limit=100&cursor=" + *pg.NextCursor
	}
}

// firstPage reads the newest entries of the home feed.
func (c *client) firstPage(limit int) []post {
	c.t.Helper()
	status, out := c.do("GET", "/v1/feed?limit="+strconv.Itoa(limit), nil)
	require.Equal(c.t, http.StatusOK, status, string(out))
	var pg postPage
	require.NoError(c.t, json.Unmarshal(out, &pg))
	return pg.Items
}

// seedFollowers makes users first..first+n-1 follow author, straight in
// PostgreSQL (COPY), keeping the follower count right.
func (c *cluster) seedFollowers(author, first int64, n int) []int64 {
	c.t.Helper()
	ctx := context.Background()
	ids := make([]int64, n)
	rows := make([][]any, n)
	for i := range n {
		ids[i] = first + int64(i)
		rows[i] = []any{ids[i], author}
	}
	_, err := c.pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"follower_id", "followee_id"}, pgx.CopyFromRows(rows))
	require.NoError(c.t, err)
	_, err = c.pool.Exec(ctx, `INSERT INTO follower_counts (user_id, followers) VALUES ($1, $2)
		ON CONFLICT (user_id) DO UPDATE SET followers = follower_counts.followers + $2`, author, n)
	require.NoError(c.t, err)
	return ids
}

// waitOutboxDrained waits until every outbox event is finished, and fails
// if one is dead.
func (c *cluster) waitOutboxDrained(timeout time.Duration) {
	c.t.Helper()
	c.waitOutboxDrainedExcept(0, timeout)
}

// waitOutboxDrainedExcept is waitOutboxDrained for every event but one.
func (c *cluster) waitOutboxDrainedExcept(except int64, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var open, dead int
		err := c.pool.QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE status IN ('pending','publishing','published')),
			count(*) FILTER (WHERE status = 'dead') FROM outbox WHERE id <> $1`, except).Scan(&open, &dead)
		require.NoError(c.t, err)
		require.Zero(c.t, dead, "dead outbox events")
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("outbox not drained after %s: %d events open", timeout, open)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parallel runs fn(i) for i in [0, n) on up to workers goroutines. The work
// is queued up front, so a worker stopped by a failed require does not
// block the others.
func parallel(n, workers int, fn func(i int)) {
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// redis returns a client on the cluster's Redis database, or on its Redis
// Cluster.
func (c *cluster) redis() redis.UniversalClient {
	c.t.Helper()
	if c.onCluster {
		opts, err := redis.ParseClusterURL(c.redisURL)
		require.NoError(c.t, err)
		opts.PoolSize = 32
		opts.ClusterStateReloadInterval = time.Second // follows a failover, as the product does
		rdb := redis.NewClusterClient(opts)
		c.t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	opts, err := redis.ParseURL(c.redisURL)
	require.NoError(c.t, err)
	opts.PoolSize = 32
	rdb := redis.NewClient(opts)
	c.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// skipOnCluster skips a test that needs one Redis (a TCP proxy in front of
// it, say), when the suite runs on the Redis Cluster.
func (c *cluster) skipOnCluster(why string) {
	c.t.Helper()
	if c.onCluster {
		c.t.Skip("one Redis only: " + why)
	}
}

func (c *cluster) feedKey(user int64) string {
	return feed.Key(c.prefix, user)
}

// markFeedsBuilt puts users in the state of readers whose (empty) feed is in
// Redis — as after their first read — without 1 request per user: the feed
// package writes the feeds and the following hashes from the follows in
// PostgreSQL.
func (c *cluster) markFeedsBuilt(users []int64) {
	c.t.Helper()
	ctx := context.Background()
	readers, err := store.New(c.pool, nil).FolloweesOf(ctx, users)
	require.NoError(c.t, err)
	seeder, err := feed.New(c.redis(), nil, feed.Config{Prefix: c.prefix, Cluster: c.onCluster})
	require.NoError(c.t, err)
	require.NoError(c.t, seeder.SeedEmpty(ctx, readers))
}

// feedsHolding returns how many of users have postID in their feed in Redis
// (a feed holds an id at most once: duplicates are checked over the API).
// Any Redis error but "no such key" fails the test, so that "no feed
// holds the post" cannot pass on an unreachable or broken Redis.
func (c *cluster) feedsHolding(users []int64, postID int64) int {
	c.t.Helper()
	n, err := c.countFeedsHolding(users, postID)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// countFeedsHolding is feedsHolding with the first Redis error returned,
// for a caller that waits through a failover.
func (c *cluster) countFeedsHolding(users []int64, postID int64) (int, error) {
	rdb := c.redis()
	ctx := context.Background()
	n := 0
	for start := 0; start < len(users); start += 1000 {
		feeds, err := feed.InspectMany(ctx, rdb, c.prefix, users[start:min(start+1000, len(users))])
		if err != nil {
			return n, fmt.Errorf("look for post %d in feeds: %w", postID, err)
		}
		for _, f := range feeds {
			if f.Has(postID) {
				n++
			}
		}
	}
	return n, nil
}

// outboxStatus returns the status of one outbox row.
func (c *cluster) outboxStatus(id int64) string {
	c.t.Helper()
	var status string
	require.NoError(c.t, c.pool.QueryRow(context.Background(), "SELECT status FROM outbox WHERE id = $1", id).Scan(&status))
	return status
}

// run runs a one-shot command (migrate, token, outbox …) and returns stdout.
func (c *cluster) run(args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(hostEnv(), c.env...)
	cmd.Dir = c.t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), err
}

// tryPost creates a post with an Idempotency-Key and reports whether the
// server accepted it (201 or 200); network errors and 5xx report false.
// Every answer is checked against docs/openapi.yaml; like tryPostStatus it
// may be called from any goroutine.
func (c *client) tryPost(body, key string) (int64, bool) {
	_, id, ok := c.tryPostStatus(body, key)
	return id, ok
}

// tryPostStatus is tryPost that also returns the status of an accepted post:
// 201 created, 200 a repeat that returned the first post. It is for the
// goroutines of a load (it never calls t.FailNow): an answer that
// docs/openapi.yaml does not allow is reported with t.Errorf (checkDescribed)
// and counts as refused.
func (c *client) tryPostStatus(body, key string) (int, int64, bool) {
	sent, err := json.Marshal(map[string]string{"body": body})
	if err != nil {
		c.t.Errorf("encode a post: %v", err)
		return 0, 0, false
	}
	req, err := http.NewRequest("POST", c.base+"/v1/posts", bytes.NewReader(sent))
	if err != nil {
		c.t.Errorf("POST /v1/posts: %v", err)
		return 0, 0, false
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Idempotency-Key", key)
	resp, out, err := roundTrip(c.http, req)
	if err != nil {
		return 0, 0, false // no answer, or one cut short (a killed serve)
	}
	if !checkDescribed(c.t, req, sent, resp, out) {
		return resp.StatusCode, 0, false
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return resp.StatusCode, 0, false
	}
	var p post
	if err := json.Unmarshal(out, &p); err != nil {
		c.t.Errorf("POST /v1/posts answered %d with a body that is no post: %v: %q", resp.StatusCode, err, out)
		return resp.StatusCode, 0, false
	}
	return resp.StatusCode, p.ID, true
}

// envValue returns the cluster's value of an environment variable (the last
// one set wins, as for the processes).
func (c *cluster) envValue(key string) string {
	v := ""
	for _, kv := range c.env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// withQuery returns rawURL with one more query parameter.
func withQuery(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// startNamed starts a process whose connections carry a name of its own
// (PostgreSQL's application_name, Redis's client name; the servers are
// shared, so the name is made unique). waitDisconnected then tells when the
// servers are done with everything it sent.
func (c *cluster) startNamed(role string, args ...string) *proc {
	c.t.Helper()
	b := make([]byte, 6)
	_, _ = crand.Read(b)
	name := "nf-e2e-" + role + "-" + hex.EncodeToString(b)
	p := c.startWith(role, []string{
		"NEWSFEED_DATABASE_URL=" + withQuery(c.t, c.envValue("NEWSFEED_DATABASE_URL"), "application_name", name),
		"NEWSFEED_REDIS_URL=" + withQuery(c.t, c.envValue("NEWSFEED_REDIS_URL"), "client_name", name),
	}, args...)
	p.name = name
	return p
}

// waitDisconnected waits until neither PostgreSQL nor Redis has a connection
// of the (killed) process p, started by startNamed, left. A server runs what
// a client sent before it died, so only then is the state it left final.
func (c *cluster) waitDisconnected(p *proc) {
	c.t.Helper()
	require.NotEmpty(c.t, p.name, "waitDisconnected needs a process started by startNamed")
	name := p.name
	rdb := c.redis()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var backends int
		require.NoError(c.t, c.pool.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&backends))
		clients, err := rdb.ClientList(ctx).Result()
		require.NoError(c.t, err)
		redisConns := strings.Count(clients, " name="+name+" ")
		if backends == 0 && redisConns == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s still has %d PostgreSQL and %d Redis connections", name, backends, redisConns)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pendingOutboxIDs returns the outbox ids of the tickets in the workers'
// pending list: delivered to a worker and not acknowledged (XPENDING), in
// every partition of the queue (NEWSFEED_QUEUE_PARTITIONS of the cluster).
func (c *cluster) pendingOutboxIDs() map[int64]bool {
	c.t.Helper()
	partitions := 1
	if v := c.envValue("NEWSFEED_QUEUE_PARTITIONS"); v != "" {
		var err error
		partitions, err = strconv.Atoi(v)
		require.NoError(c.t, err)
	}
	ids := map[int64]bool{}
	for p := range partitions {
		stream := c.prefix + "tickets"
		if p > 0 {
			stream += ":{" + strconv.Itoa(p) + "}"
		}
		for id := range c.pendingOutboxIDsOf(stream) {
			ids[id] = true
		}
	}
	return ids
}

// pendingOutboxIDsOf is pendingOutboxIDs of one stream.
func (c *cluster) pendingOutboxIDsOf(stream string) map[int64]bool {
	c.t.Helper()
	rdb := c.redis()
	ctx := context.Background()
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: "fanout", Start: "-", End: "+", Count: 100_000,
	}).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		return nil // a partition no process made yet
	}
	require.NoError(c.t, err)
	ids := map[int64]bool{}
	if len(pending) == 0 {
		return ids
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(pending))
	for i, p := range pending {
		cmds[i] = pipe.XRange(ctx, stream, p.ID, p.ID)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(c.t, err)
	for i, cmd := range cmds {
		msgs := cmd.Val()
		require.Len(c.t, msgs, 1, "pending ticket %s is in the stream", pending[i].ID)
		id, err := strconv.ParseInt(fmt.Sprint(msgs[0].Values["id"]), 10, 64)
		require.NoError(c.t, err)
		ids[id] = true
	}
	return ids
}

// queryInts runs a query that returns one bigint column.
func (c *cluster) queryInts(sql string, args ...any) []int64 {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), sql, args...)
	require.NoError(c.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(c.t, err)
	return ids
}

// testRand returns the random source of a test's choices (kill points), and
// prints its seed; NEWSFEED_E2E_SEED repeats a run's choices.
func testRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("NEWSFEED_E2E_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "NEWSFEED_E2E_SEED")
	}
	t.Logf("seed %d (repeat with NEWSFEED_E2E_SEED=%d go test -run '%s' ./e2e/)", seed, seed, t.Name())
	return rand.New(rand.NewPCG(seed, seed>>1|1))
}

// hostEnv is the test's environment without the product's NEWSFEED_*
// settings (what `eval "$(scripts/cluster.sh env)"` exports, say): a process
// under test is configured by its cluster alone.
func hostEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NEWSFEED_") && !strings.HasPrefix(kv, "NEWSFEED_TEST_") && !strings.HasPrefix(kv, "NEWSFEED_E2E_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestHarnessChecksAnswersOnAnyGoroutine: the harness's requests that
// tolerate failure — tryPost on a load's goroutines, opsGet and readyz in
// require.Eventually's conditions — check every answer against
// docs/openapi.yaml as client.do does, and report drift with t.Errorf from
// whichever goroutine they run on, never t.FailNow off the test's own.
func TestHarnessChecksAnswersOnAnyGoroutine(t *testing.T) {
	t.Parallel()
	// fake answers as the API does (described), or not (drift).
	fake := func(described bool) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			answer := func(status int, contentType, body string) {
				w.Header().Set("Content-Type", contentType)
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}
			switch {
			case r.URL.Path == "/v1/posts" && described:
				answer(http.StatusOK, "application/json", `{"id":71,"author_id":5,"body":"a repeat","created_at":"2026-11-30T08:00:00.123Z"}`)
			case r.URL.Path == "/v1/posts":
				answer(http.StatusOK, "application/json", `{"id":71,"author_id":5,"body":"a repeat"}`) // no created_at
			case r.URL.Path == "/readyz" && described:
				answer(http.StatusServiceUnavailable, "application/json", `{"error":{"code":"unavailable","message":"Redis is unreachable"}}`)
			case r.URL.Path == "/readyz":
				answer(http.StatusServiceUnavailable, "text/plain", "Redis is unreachable")
			case r.URL.Path == "/metrics" && described:
				answer(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", "newsfeed_outbox_pending 0\n")
			case r.URL.Path == "/metrics":
				answer(http.StatusOK, "application/json", `{"newsfeed_outbox_pending":0}`)
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	// run calls each helper on a goroutine of its own, as a load and
	// require.Eventually do, and returns what they reported.
	run := func(addr string) *recordingT {
		rec := &recordingT{TB: t}
		cl := &client{t: rec, base: "http://" + addr, token: "a-token", http: &http.Client{Timeout: 10 * time.Second}}
		var wg sync.WaitGroup
		wg.Go(func() { cl.tryPost("a repeat", "key-1") })
		wg.Go(func() { readyz(rec, addr) })
		wg.Go(func() { _, _, _ = opsGet(rec, addr, "/metrics") })
		wg.Wait()
		require.False(t, rec.failedNow, "t.FailNow off the test's goroutine")
		return rec
	}

	require.Empty(t, run(fake(true)).errors, "described answers")

	drift := run(fake(false)).errors
	require.Len(t, drift, 3, "one error for each answer: %q", drift)
	slices.Sort(drift)
	for i, target := range []string{"GET /metrics answered 200", "GET /readyz answered 503", "POST /v1/posts answered 200"} {
		require.Contains(t, drift[i], "docs/openapi.yaml and the API disagree: "+target)
	}
}

// recordingT is a testing.TB that records what a helper reports instead of
// failing the test, for the tests of the harness itself.
type recordingT struct {
	testing.TB
	mu        sync.Mutex
	errors    []string
	failedNow bool
}

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingT) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recordingT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.FailNow()
}

func (r *recordingT) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recordingT) FailNow() {
	r.mu.Lock()
	r.failedNow = true
	r.mu.Unlock()
	runtime.Goexit()
}
