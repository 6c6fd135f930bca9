package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What an operator sees of a running process: its log lines about
// dependency outages, and how it leaves a load balancer. These tests read
// log lines on purpose: here the lines are what is promised (docs/API.md,
// "Logs").

// logLine is one JSON line of a process's stderr.
type logLine map[string]any

// lines parses p's stderr, failing on a line that is not JSON.
func (p *proc) lines() []logLine {
	p.t.Helper()
	var out []logLine
	for _, raw := range strings.Split(strings.TrimSpace(p.output()), "\n") {
		if raw == "" {
			continue
		}
		var l logLine
		require.NoError(p.t, json.Unmarshal([]byte(raw), &l), "a log line that is not JSON: %s", raw)
		out = append(out, l)
	}
	return out
}

// count returns how many of p's lines have message msg.
func (p *proc) count(msg string) int {
	n := 0
	for _, l := range p.lines() {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}

// TestOutagesLoggedOncePerTransition: PostgreSQL, then Redis, goes away
// from every role while requests keep failing (or, for Redis, are served
// degraded: feed reads from PostgreSQL, rate limits and read-your-writes
// checks skipped) and the loops keep retrying; each role that met the
// outage logs it once when it began and once when it ended, every line the
// API writes has its request's id, and no line anywhere carries a stack
// trace.
func TestOutagesLoggedOncePerTransition(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_LOG_LEVEL=info", "NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false",
		// Limits on, far above what the test sends: the limiter is asked.
		"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=100000", "NEWSFEED_RATELIMIT_FOLLOWS_PER_MINUTE=100000"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	dbURL, err := url.Parse(c.dbURL)
	require.NoError(t, err)
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	pg, rd := newProxy(t, dbURL.Host), newProxy(t, redisURL.Host)
	pgURL, rdURL := *dbURL, *redisURL
	pgURL.Host, rdURL.Host = pg.addr, rd.addr
	env := []string{"NEWSFEED_DATABASE_URL=" + pgURL.String(), "NEWSFEED_REDIS_URL=" + rdURL.String()}
	serve, dispatcher, worker := c.startWith("serve", env), c.startWith("dispatch", env), c.startWith("work", env)
	john := serve.client(5)

	const failing = 30
	waitLine := func(p *proc, msg string) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.Positive(ct, p.count(msg))
		}, 30*time.Second, 20*time.Millisecond, "%s logs %q", p.role, msg)
	}

	t.Log("PostgreSQL down")
	pg.down()
	parallel(failing, 8, func(int) {
		status, _ := john.do("POST", "/v1/posts", map[string]string{"body": "refused"})
		assert.Equal(t, http.StatusServiceUnavailable, status)
	})
	const pgDown, pgUp = "PostgreSQL is unreachable: what needs it fails, and is retried, until it answers", "PostgreSQL answers again"
	waitLine(dispatcher, pgDown) // its claims fail
	waitLine(worker, pgDown)     // its watch's pings
	pg.up()
	waitLine(serve, pgUp)
	waitLine(dispatcher, pgUp)
	waitLine(worker, pgUp)

	t.Log("Redis down")
	rd.down()
	alan := serve.client(6)
	parallel(failing, 8, func(int) {
		status, _ := alan.do("PUT", "/v1/following/5", nil) // accepted; the feed's backfill fails and is left to the event
		assert.Equal(t, http.StatusNoContent, status)
		status, _ = alan.do("GET", "/v1/feed", nil) // from PostgreSQL
		assert.Equal(t, http.StatusOK, status)
		status, _ = alan.do("GET", "/v1/users/5/followers", nil) // on the primary, with database.read_url
		assert.Equal(t, http.StatusOK, status)
	})
	john.post("published once Redis is back")
	const rdDown, rdUp = "Redis is unreachable: what needs it fails, and is retried, until it answers", "Redis answers again"
	waitLine(serve, rdDown)
	waitLine(dispatcher, rdDown) // its publications fail
	waitLine(worker, rdDown)     // its reads fail
	rd.up()
	for _, p := range []*proc{serve, dispatcher, worker} {
		waitLine(p, rdUp)
	}
	c.waitOutboxDrained(60 * time.Second)

	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, 0, p.stop())
		// Every role's health watch pings both, whatever the role did
		// meanwhile: each logs each outage once.
		for msg, want := range map[string]int{pgDown: 1, pgUp: 1, rdDown: 1, rdUp: 1} {
			require.Equal(t, want, p.count(msg), "%s: %q", p.role, msg)
		}
		for _, l := range p.lines() {
			require.NotContains(t, l, "stacktrace", "%s: %v", p.role, l)
			if l["logger"] == "api" {
				require.NotEmpty(t, l["request_id"], "%s: every line the API writes is a request's: %v", p.role, l)
			}
			require.NotEqual(t, "request failed", l["msg"], "%s: a failure the outage explains is a debug line", p.role)
			ts, _ := l["ts"].(string)
			_, err := time.Parse(time.RFC3339Nano, ts)
			require.NoError(t, err, "%s: ts %v is ISO 8601", p.role, l["ts"])
		}
	}
	requests := 0
	for _, l := range serve.lines() {
		if l["msg"] == "request" && l["route"] == "/v1/posts" && l["status"] == float64(http.StatusServiceUnavailable) {
			requests++
			require.NotEmpty(t, l["request_id"])
		}
	}
	require.Equal(t, failing, requests, "the access log has every refused request")
}

// TestDrain: on SIGTERM, serve's /readyz answers 503 at once, on both
// addresses, while the API goes on answering — posts accepted and read back —
// for the whole of shutdown_drain (2s here; 5s by default, which
// TestShutdownDrainDefault in app checks); then it stops accepting
// connections and exits 0. Every answer is checked against docs/openapi.yaml.
func TestDrain(t *testing.T) {
	t.Parallel()
	const drain = 2 * time.Second
	// A request sent this long before the drain can have ended is answered
	// before it ends: on a loaded machine one takes tens of milliseconds.
	const margin = 500 * time.Millisecond
	c := newCluster(t)
	serve := c.startWith("serve", []string{"NEWSFEED_SHUTDOWN_DRAIN=" + drain.String()})
	john := serve.client(5)
	john.post("before")
	require.Equal(t, http.StatusOK, readyz(t, serve.metricsAddr))
	require.Equal(t, http.StatusOK, readyz(t, serve.httpAddr))

	signalled := time.Now()
	require.NoError(t, serve.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return readyz(t, serve.metricsAddr) == http.StatusServiceUnavailable },
		drain/2, time.Millisecond, "readyz turns 503 at once")

	// The drain began after the signal was sent, so it lasts until
	// signalled+drain at least: until then, polled all along, serve is
	// not ready on either address and the API answers as before.
	var accepted []int64
	steps := []func(){
		func() {
			require.Equal(t, http.StatusServiceUnavailable, readyz(t, serve.metricsAddr), "readyz on metrics.addr")
		},
		func() {
			require.Equal(t, http.StatusServiceUnavailable, readyz(t, serve.httpAddr), "readyz on http.addr")
		},
		func() { accepted = append(accepted, john.post(fmt.Sprintf("during the drain %d", len(accepted))).ID) },
		func() {
			status, _ := john.do("GET", "/v1/posts/"+jsonID(accepted[len(accepted)-1]), nil)
			require.Equal(t, http.StatusOK, status, "the post accepted during the drain is read back")
		},
	}
	for i := 0; time.Since(signalled) < drain-margin; i++ {
		select {
		case <-serve.done:
			t.Fatalf("serve stopped %s after SIGTERM, within its drain of %s: %v", time.Since(signalled), drain, serve.exitErr)
		default:
		}
		steps[i%len(steps)]()
		time.Sleep(10 * time.Millisecond)
	}
	require.GreaterOrEqual(t, len(accepted), 3, "the API was polled all through the drain")

	// Then it stops accepting: a connection is refused (never before the
	// drain can have ended), and serve exits 0.
	var refusedAfter time.Duration
	for {
		_, _, err := opsGet(t, serve.httpAddr, "/healthz")
		if err != nil {
			refusedAfter = time.Since(signalled)
			break
		}
		if time.Since(signalled) > drain+30*time.Second {
			t.Fatalf("serve still accepts connections %s after SIGTERM, with a drain of %s", time.Since(signalled), drain)
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.GreaterOrEqual(t, refusedAfter, drain, "serve stopped accepting before its drain ended")
	t.Logf("serve stopped accepting %s after SIGTERM (drain %s), after %d posts during the drain", refusedAfter, drain, len(accepted))
	select {
	case <-serve.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30s of its drain")
	}
	require.Equal(t, 0, serve.cmd.ProcessState.ExitCode(), "exits 0 after the drain: %v", serve.exitErr)
	var n int
	require.NoError(t, c.pool.QueryRow(t.Context(), "SELECT count(*) FROM posts WHERE body LIKE 'during the drain %'").Scan(&n))
	require.Equal(t, len(accepted), n, "every post accepted during the drain is stored")
}

func jsonID(id int64) string {
	raw, _ := json.Marshal(id)
	return string(raw)
}
