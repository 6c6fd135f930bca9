package e2e

import (
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A per-user rate limit is shared by every serve process of a deployment:
// posts made on two processes count together, the one over the limit gets
// 429 with Retry-After, and another user is served meanwhile.
func TestRateLimitAcrossServeProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=3", "NEWSFEED_RATELIMIT_FOLLOWS_PER_MINUTE=2"))
	a, b := c.start("serve"), c.start("serve")
	start := time.Now()
	for i := range 3 {
		[]*proc{a, b}[i%2].client(5).post("post " + strconv.Itoa(i))
	}
	for _, p := range []*proc{a, b} {
		status, header, body := rawDo(t, p, 5, "POST", "/v1/posts", `{"body":"one too many"}`)
		require.Equal(t, http.StatusTooManyRequests, status, body)
		require.Contains(t, body, `"code":"rate_limited"`)
		secs, err := strconv.Atoi(header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After in whole seconds: %q", header.Get("Retry-After"))
		// 3 a minute: the next 20 s after the first, less what passed
		// since (seconds, on a busy machine), rounded either way.
		passed := int(math.Ceil(time.Since(start).Seconds()))
		require.LessOrEqual(t, secs, 21, "3 a minute: the next within 20 s")
		require.GreaterOrEqual(t, secs, 20-passed-1, "3 a minute: the next 20 s after the first post, %d s ago at most", passed)
	}
	b.client(6).post("another user is served")

	a.client(5).follow(6)
	status, _, body := rawDo(t, b, 5, "DELETE", "/v1/following/6", "")
	require.Equal(t, http.StatusNoContent, status, body)
	status, _, body = rawDo(t, a, 5, "PUT", "/v1/following/7", "")
	require.Equal(t, http.StatusTooManyRequests, status, "follows and unfollows count together: %s", body)
}

func rawDo(t *testing.T, p *proc, as int64, method, path, body string) (int, http.Header, string) {
	t.Helper()
	c := p.client(as)
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	requireDescribed(t, req, []byte(body), resp, out)
	return resp.StatusCode, resp.Header, string(out)
}

// A client that sends its request headers a byte a second is disconnected
// once http.read_header_timeout has passed, long before it would finish,
// while other clients are served; headers over http.max_header_bytes get 431.
func TestSlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	const readHeaderTimeout = time.Second
	// The cut comes when the timeout has passed, give or take a timer that
	// fires late: on a loaded machine, a few seconds at most.
	const margin = 4 * time.Second
	c := newCluster(t, withEnv("NEWSFEED_HTTP_READ_HEADER_TIMEOUT="+readHeaderTimeout.String(), "NEWSFEED_HTTP_MAX_HEADER_BYTES=8192"))
	serve := c.start("serve")

	// Taken before the dial: the server's timeout starts after it.
	start := time.Now()
	conn, err := net.Dial("tcp", serve.httpAddr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\n")
	require.NoError(t, err)

	// Then the headers, a byte a second: a minute to send, unless the
	// server hangs up.
	headers := "Host: newsfeed\r\nX-Slow: " + strings.Repeat("x", 60) + "\r\n\r\n"
	trickleDone := make(chan error, 1)
	go func() {
		for i := range len(headers) {
			if _, err := conn.Write([]byte{headers[i]}); err != nil {
				trickleDone <- err
				return
			}
			time.Sleep(time.Second)
		}
		trickleDone <- nil
	}()

	// The server hangs up: the read ends (EOF, or a reset once the trickle
	// writes into the closed socket). Before that, Go's server may answer
	// 400 Bad Request (the timeout cut a header line short), never the
	// route. Watched from the start, so that the time of the cut is the
	// cut's.
	type cut struct {
		after  time.Duration
		answer []byte
		err    error
	}
	cuts := make(chan cut, 1)
	go func() {
		if err := conn.SetReadDeadline(start.Add(readHeaderTimeout + margin)); err != nil {
			cuts <- cut{err: err}
			return
		}
		answer, err := io.ReadAll(conn)
		cuts <- cut{after: time.Since(start), answer: answer, err: err}
	}()

	// Meanwhile others are served.
	author := serve.client(9)
	for i := range 5 {
		author.post("served beside a slow client " + strconv.Itoa(i))
	}

	got := <-cuts
	var netErr net.Error
	require.False(t, errors.As(got.err, &netErr) && netErr.Timeout(),
		"the server kept the trickling connection open for %s: %v", readHeaderTimeout+margin, got.err)
	if len(got.answer) > 0 {
		require.True(t, strings.HasPrefix(string(got.answer), "HTTP/1.1 400 "),
			"the server served a request whose headers never ended: %q", got.answer)
	}
	t.Logf("cut %s after the dial (read_header_timeout %s), answer %q, error %v", got.after, readHeaderTimeout, got.answer, got.err)
	require.GreaterOrEqual(t, got.after, readHeaderTimeout, "cut by the timeout, not before it")
	require.Less(t, got.after, readHeaderTimeout+margin)
	select {
	case err := <-trickleDone:
		require.Error(t, err, "the whole slow header was accepted")
	case <-time.After(margin):
		t.Fatalf("the trickle went on %s after the server hung up", margin)
	}

	resp, out := get(t, "http://"+serve.httpAddr+"/healthz", "X-Big", strings.Repeat("a", 16<<10))
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	requireDescribed(t, resp.Request, nil, resp, out)
}

// A Redis that accepts connections and never answers (paused, partitioned)
// does not hold writes: the rate limiter gives it 250 ms and lets the post
// through. Without a deadline on the socket, each post would wait for the
// client's read timeout (3 s, then a retry) — past this client's patience.
func TestSilentRedisDoesNotHoldWrites(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.skipOnCluster("a silent stand-in for one Redis")
	var lc net.ListenConfig
	silent, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() }) // read nothing, answer nothing
		}
	}()
	serve := c.startWith("serve", []string{
		"NEWSFEED_REDIS_URL=redis://" + silent.Addr().String() + "/0",
		"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=60",
	})
	author := serve.client(5)
	author.http.Timeout = 2500 * time.Millisecond
	for i := range 3 {
		author.post("while Redis says nothing " + strconv.Itoa(i))
	}
}
