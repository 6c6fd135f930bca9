package e2e

import (
	"bufio"
	"errors"
	"io"
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
	for i := range 3 {
		[]*proc{a, b}[i%2].client(5).post("post " + strconv.Itoa(i))
	}
	for _, p := range []*proc{a, b} {
		status, header, body := rawDo(t, p, 5, "POST", "/v1/posts", `{"body":"one too many"}`)
		require.Equal(t, http.StatusTooManyRequests, status, body)
		require.Contains(t, body, `"code":"rate_limited"`)
		secs, err := strconv.Atoi(header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After in whole seconds: %q", header.Get("Retry-After"))
		require.InDelta(t, 20, secs, 1, "3 a minute: the next in about 20 s")
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

// A client that sends its request headers a byte at a time is disconnected
// once http.read_header_timeout has passed, long before it would finish,
// while other clients are served; headers over http.max_header_bytes get 431.
func TestSlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_HTTP_READ_HEADER_TIMEOUT=1s", "NEWSFEED_HTTP_MAX_HEADER_BYTES=8192"))
	serve := c.start("serve")

	conn, err := net.Dial("tcp", serve.httpAddr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: newsfeed\r\nX-Slow: ")
	require.NoError(t, err)

	// 600 bytes at one per 50 ms: 30 s to send, unless the server hangs up.
	trickleDone := make(chan error, 1)
	go func() {
		for range 600 {
			if _, err := conn.Write([]byte("x")); err != nil {
				trickleDone <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		trickleDone <- nil
	}()

	// Meanwhile others are served.
	author := serve.client(9)
	for i := range 5 {
		author.post("served beside a slow client " + strconv.Itoa(i))
	}

	// The server closes the connection: the read ends (EOF, or a reset
	// once the trickle writes into the closed socket), well before the
	// trickle could have finished its header.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	_, err = bufio.NewReader(conn).ReadByte()
	var netErr net.Error
	require.False(t, errors.As(err, &netErr) && netErr.Timeout(), "the server kept the trickling connection open: %v", err)
	require.Error(t, err, "the server answered a request whose headers never ended")
	select {
	case err := <-trickleDone:
		require.Error(t, err, "the whole slow header was accepted")
	case <-time.After(20 * time.Second):
		t.Fatal("the trickle went on after the server hung up")
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
