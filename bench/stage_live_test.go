package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// TestSSEClientsRead: the bench's stream client counts the post events of
// a stream as GET /v1/feed/stream writes them (with and without an id,
// several in one write, between comments, retry and remove events), keeps
// each post's arrival when recording, and counts a stream the server ends.
func TestSSEClientsRead(t *testing.T) {
	created := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	post := func(id int64) string {
		return fmt.Sprintf(`{"id":%d,"author_id":10,"body":"bench post","created_at":%q}`, id, created.Format(time.RFC3339Nano))
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":{"code":"unauthenticated"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 2000\n\n: keep-alive\n\n")
		fmt.Fprintf(w, "event: post\nid: 7\ndata: %s\n\nevent: post\ndata: %s\n\n", post(7), post(5)) // 5 came after 7: no id
		fmt.Fprint(w, "event: remove\ndata: {\"id\":5}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintf(w, "event: post\r\nid: 9\r\ndata: %s\r\n\r\n", post(9))
	}))
	defer srv.Close()

	ctx, s := newSSEClients(context.Background())
	s.record.Store(true)
	require.ErrorContains(t, s.open(ctx, streamClient(), srv.URL, "wrong"), "401")
	require.NoError(t, s.open(ctx, streamClient(), srv.URL, "tok"))
	require.Eventually(t, func() bool { return s.posts.Load() == 2 }, 5*time.Second, time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return s.ended.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the server ended the stream")
	require.EqualValues(t, 3, s.posts.Load())
	full, seen := s.coverage(1)
	require.Equal(t, 3, full)
	require.Equal(t, 3, seen)
	s.mu.Lock()
	require.True(t, created.Equal(s.created[9]))
	s.mu.Unlock()

	all, last, afterFeed, feedWritten := s.latencies(map[int64]feedWrite{
		7: {created: created, finished: created.Add(10 * time.Millisecond)},
	})
	require.Len(t, all, 3)
	require.Len(t, last, 3)
	require.Len(t, afterFeed, 1, "the posts whose fan-out finished")
	require.Equal(t, []time.Duration{10 * time.Millisecond}, feedWritten)
	for _, d := range all {
		require.Positive(t, d)
	}

	s.reset()
	require.Zero(t, s.posts.Load())
	_, seen = s.coverage(1)
	require.Zero(t, seen)
	s.close()

	// A stream the bench closes is not one the server ended.
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: post\nid: 3\ndata: %s\n\n", post(3))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer held.Close()
	ctx, s = newSSEClients(context.Background())
	require.NoError(t, s.open(ctx, streamClient(), held.URL, "tok"))
	require.Eventually(t, func() bool { return s.posts.Load() == 1 }, 5*time.Second, time.Millisecond)
	s.close()
	require.Zero(t, s.ended.Load())

	var none *sseClients // a condition without streams
	none.reset()
	none.close()
}

// TestStartInProcessSetLive: the in-process workers switch between the
// roles with and without the live path, one kind at a time; StopWorkers
// ends them for good.
func TestStartInProcessSetLive(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.NewRedis(t)
	url, front := healthz(t)
	var live, off, running atomic.Int64
	role := func(n *atomic.Int64) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			n.Add(1)
			if running.Add(1) != 1 {
				t.Error("two kinds of workers at once")
			}
			<-ctx.Done()
			running.Add(-1)
			return nil
		}
	}
	h, cleanup, err := StartInProcess(ctx, Harness{APIURL: url, Redis: rdb, Prefix: prefix}, Roles{
		Front: front, Workers: role(&live), WorkersWithoutLive: role(&off), Close: func() {},
	})
	require.NoError(t, err)
	defer cleanup()
	require.NotNil(t, h.SetLive)
	require.Eventually(t, func() bool { return live.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, h.SetLive(false))
	require.Eventually(t, func() bool { return off.Load() == 1 && running.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, h.SetLive(true))
	require.Eventually(t, func() bool { return live.Load() == 2 && running.Load() == 1 }, 5*time.Second, time.Millisecond)
	h.StopWorkers()
	require.Zero(t, running.Load())
	require.Error(t, h.SetLive(true), "the workers were stopped for good")
	require.Zero(t, running.Load())

	// Without the role, no switch.
	url2, front2 := healthz(t)
	h2, cleanup2, err := StartInProcess(ctx, Harness{APIURL: url2, Redis: rdb, Prefix: prefix}, Roles{
		Front: front2, Workers: func(ctx context.Context) error { <-ctx.Done(); return nil }, Close: func() {},
	})
	require.NoError(t, err)
	defer cleanup2()
	require.Nil(t, h2.SetLive)
}

func TestCommandDeltas(t *testing.T) {
	before := map[string]redisCounters{
		"a": {runID: "1", calls: map[string]int64{"spublish": 3}, usec: map[string]int64{"spublish": 30}},
		"b": {runID: "2", calls: map[string]int64{"spublish": 1}, usec: map[string]int64{"spublish": 5}},
	}
	after := map[string]redisCounters{
		"a": {runID: "1", calls: map[string]int64{"spublish": 5}, usec: map[string]int64{"spublish": 50}},
		"b": {runID: "3", calls: map[string]int64{"spublish": 9}, usec: map[string]int64{"spublish": 90}}, // restarted: left out
		"c": {runID: "4", calls: map[string]int64{"spublish": 9}, usec: map[string]int64{"spublish": 90}}, // new: left out
	}
	require.EqualValues(t, 2, callsDelta(before, after, "spublish"))
	require.EqualValues(t, 20, usecDelta(before, after, "spublish"))
	require.Zero(t, callsDelta(before, after, "get"))
}
