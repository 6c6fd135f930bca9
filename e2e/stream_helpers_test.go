package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client of GET /v1/feed/stream, as a web page holds it: the events in
// order, and the view they add up to (every post sent, less those removed).

// sseEvent is one event of a stream.
type sseEvent struct {
	event string // post or remove
	id    string // the id: line, if any
	data  string
}

// feedStream is one open stream of a user's home feed.
type feedStream struct {
	t      *testing.T
	events chan sseEvent // closed when the stream ends
	cancel context.CancelFunc
	// log is every event taken so far, in order; view what they add up to.
	log  []sseEvent
	view map[int64]post
}

// openStream opens cl's live stream and requires 200, its headers and
// first block (retry: and the resume point, which come at once) as
// docs/openapi.yaml describes them. The events are read as they come.
func (c *client) openStream(t *testing.T) *feedStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/feed/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	// Until the first block is read: a server that sends nothing fails the
	// test instead of hanging it.
	giveUp := time.AfterFunc(15*time.Second, cancel)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body := bufio.NewReader(resp.Body)
	var first []byte
	for !bytes.HasSuffix(first, []byte("\n\n")) {
		line, err := body.ReadBytes('\n')
		require.NoError(t, err, "the stream's first block: %q", first)
		first = append(first, line...)
	}
	giveUp.Stop()
	requireDescribed(t, req, nil, resp, first)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", first)
	st := &feedStream{t: t, events: make(chan sseEvent, 1000), cancel: cancel, view: map[int64]post{}}
	go st.read(body)
	t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
	})
	return st
}

func (st *feedStream) read(body *bufio.Reader) {
	defer close(st.events)
	sc := bufio.NewScanner(body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.event != "" {
				st.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// take applies one event to the view, checking its shape: a post event
// carries a post (or a repost, without body) and, if it has an id: line,
// the post's id; a remove carries {"id": N}.
func (st *feedStream) take(ev sseEvent) {
	st.t.Helper()
	st.log = append(st.log, ev)
	switch ev.event {
	case "post":
		var p post
		require.NoError(st.t, json.Unmarshal([]byte(ev.data), &p), "post event %q", ev.data)
		requirePostShape(st.t, []byte(ev.data))
		if ev.id != "" {
			require.Equal(st.t, strconv.FormatInt(p.ID, 10), ev.id, "the id: of a post event is the post's")
		}
		st.view[p.ID] = p
	case "remove":
		var r map[string]int64
		require.NoError(st.t, json.Unmarshal([]byte(ev.data), &r), "remove event %q", ev.data)
		require.Len(st.t, r, 1, "remove event %q", ev.data)
		id, ok := r["id"]
		require.True(st.t, ok, "remove event %q", ev.data)
		delete(st.view, id)
	default:
		st.t.Fatalf("an event of no kind the contract has: %+v", ev)
	}
}

// await takes events until done holds (it is asked before each), for at
// most 15 s; the deadline is for events that never come, not a measure.
func (st *feedStream) await(what string, done func() bool) {
	st.t.Helper()
	deadline := time.After(15 * time.Second)
	for !done() {
		select {
		case ev, ok := <-st.events:
			require.True(st.t, ok, "the stream ended while waiting for %s; events: %v", what, st.log)
			st.take(ev)
		case <-deadline:
			st.t.Fatalf("the stream did not bring %s within 15 s; it holds %v after the events %v", what, st.ids(), st.log)
		}
	}
}

// awaitShown takes events until the view holds each of ids.
func (st *feedStream) awaitShown(ids ...int64) {
	st.t.Helper()
	st.await(fmt.Sprintf("posts %v", ids), func() bool {
		for _, id := range ids {
			if _, ok := st.view[id]; !ok {
				return false
			}
		}
		return true
	})
}

// ids returns the view's post ids, newest first, as a feed lists them.
func (st *feedStream) ids() []int64 {
	out := make([]int64, 0, len(st.view))
	for id := range st.view {
		out = append(out, id)
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// postsSince returns the post events taken after the first n events.
func (st *feedStream) postsSince(n int) []post {
	st.t.Helper()
	var out []post
	for _, ev := range st.log[n:] {
		if ev.event == "post" {
			var p post
			require.NoError(st.t, json.Unmarshal([]byte(ev.data), &p))
			out = append(out, p)
		}
	}
	return out
}
