package web_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/browser"
	"github.com/newsfeed/newsfeed/web"
)

// The page's side of the stream's contract, against a server that plays
// the stream's part step by step: what the real stream makes hard to
// provoke on purpose (a connection dropped mid-stream, a refusal of the
// stream alone). The real stream is driven by the e2e tests.

// streamServer serves the app, a token for anyone, a one-post feed, and a
// stream whose every connection the test answers through connections.
type streamServer struct {
	*httptest.Server
	connections chan streamConn
	closing     chan struct{} // the test ended: held connections let go
	mu          sync.Mutex
	feedReads   int
	feed        func() []any // the items of GET /v1/feed; nil: firstPost alone
	older       []any        // when set, the first page's next_cursor leads to these
}

// streamConn is one request for the stream, held until the test answers.
type streamConn struct {
	lastEventID string // the Last-Event-ID header
	queryID     string // the last_event_id query parameter
	answer      chan func(w http.ResponseWriter, flush func())
}

var firstPost = map[string]any{"id": 3, "author_id": 9, "body": "an older post", "created_at": "2026-12-01T08:00:00Z"}

func newStreamServer(t *testing.T) *streamServer {
	t.Helper()
	s := &streamServer{connections: make(chan streamConn), closing: make(chan struct{})}
	app := web.New(web.Config{Dev: true})
	mux := http.NewServeMux()
	for _, p := range app.Paths() {
		mux.Handle("GET "+p, app)
	}
	mux.HandleFunc("POST /dev/token", func(w http.ResponseWriter, _ *http.Request) {
		// The page reads the claims only; the signature is the server's
		// business.
		claims, _ := json.Marshal(map[string]any{"sub": "7", "exp": time.Now().Add(time.Hour).Unix()})
		token := "e30." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"
		writeJSON(w, http.StatusOK, map[string]any{"token": token, "user_id": 7})
	})
	mux.HandleFunc("GET /v1/feed", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.feedReads++
		items := []any{firstPost}
		if s.feed != nil {
			items = s.feed()
		}
		var next any
		switch {
		case r.URL.Query().Get("cursor") == "older":
			items = s.older
		case s.older != nil:
			next = "older"
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"items": items, "next_cursor": next})
	})
	mux.HandleFunc("PUT /v1/following/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/users/{id}/{list}", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"items": []any{}, "next_cursor": nil})
	})
	mux.HandleFunc("GET /v1/feed/stream", func(w http.ResponseWriter, r *http.Request) {
		c := streamConn{
			lastEventID: r.Header.Get("Last-Event-ID"),
			queryID:     r.URL.Query().Get("last_event_id"),
			answer:      make(chan func(http.ResponseWriter, func())),
		}
		select {
		case s.connections <- c:
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		}
		select {
		case answer := <-c.answer:
			answer(w, func() { http.NewResponseController(w).Flush() })
		case <-r.Context().Done():
		case <-s.closing:
		}
	})
	s.Server = httptest.NewServer(mux)
	// Before the browser is gone (cleanups run last first): a connection
	// it holds must not keep Close waiting.
	t.Cleanup(func() {
		close(s.closing)
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

func (s *streamServer) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.feedReads
}

// next waits for the page's next request for the stream.
func (s *streamServer) next(t *testing.T) streamConn {
	t.Helper()
	select {
	case c := <-s.connections:
		return c
	case <-time.After(browser.Timeout):
		t.Fatal("the page did not ask for the stream")
		return streamConn{}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// events starts a stream, writes events, and keeps the connection open
// until hold is closed (nil: ends it at once, as a dropped connection).
func (s *streamServer) events(hold <-chan struct{}, evs ...string) func(http.ResponseWriter, func()) {
	return func(w http.ResponseWriter, flush func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		// Reconnect quickly after a drop: the browser's default is 3 s.
		fmt.Fprint(w, "retry: 50\n\n")
		for _, ev := range evs {
			fmt.Fprint(w, ev)
		}
		flush()
		if hold != nil {
			select {
			case <-hold:
			case <-s.closing:
			}
		}
	}
}

// eventsFrom starts a stream and writes each event it receives from evs,
// as it comes, until the test ends.
func (s *streamServer) eventsFrom(evs <-chan string) func(http.ResponseWriter, func()) {
	return func(w http.ResponseWriter, flush func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "retry: 50\n\n")
		flush()
		for {
			select {
			case ev := <-evs:
				fmt.Fprint(w, ev)
				flush()
			case <-s.closing:
				return
			}
		}
	}
}

func refuse(status int, code, message string) func(http.ResponseWriter, func()) {
	return func(w http.ResponseWriter, _ func()) {
		writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
	}
}

// refuseAfter is refuse with a Retry-After header.
func refuseAfter(status int, code, message, retryAfter string) func(http.ResponseWriter, func()) {
	return func(w http.ResponseWriter, flush func()) {
		w.Header().Set("Retry-After", retryAfter)
		refuse(status, code, message)(w, flush)
	}
}

// textMatches is an expression true when the text of the element the CSS
// selector finds matches the JavaScript regular expression re.
func textMatches(css, re string) string {
	return fmt.Sprintf(`new RegExp(%s).test(document.querySelector(%s)?.textContent ?? '')`, browser.JS(re), browser.JS(css))
}

func postEvent(id int, body string) string {
	data, _ := json.Marshal(map[string]any{"id": id, "author_id": 9, "body": body, "created_at": "2026-12-01T09:00:00Z"})
	return fmt.Sprintf("event: post\nid: %d\ndata: %s\n\n", id, data)
}

func TestLiveFeedFollowsTheStreamsContract(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	page := b.NewPage("reader")
	page.Navigate(s.URL + "/")
	page.Fill("#dev-user", "7")
	page.Click("#dev-sign-in button[type=submit]")

	// The stream is asked for first, then the first page; nothing to
	// resume from yet.
	first := s.next(t)
	require.Empty(t, first.lastEventID)
	require.Empty(t, first.queryID)
	page.WaitFor("the first page", `document.querySelector('#feed > li[data-id="3"]') !== null`)

	// A post arrives on top, said in the live region; one leaves; then the
	// connection drops.
	first.answer <- s.events(nil,
		postEvent(5, "live one"),
		"event: remove\ndata: {\"id\": 3}\n\n",
		": a comment, as the heartbeat\n\n",
	)
	page.WaitFor("the live post on top", `document.querySelector('#feed > li:first-child')?.dataset.id === '5'`)
	page.WaitFor("the removed post gone", `document.querySelector('#feed > li[data-id="3"]') === null`)
	require.Equal(t, "New post from user 9: live one", page.Text("#announcer"))

	// The browser reconnects by itself and says where it was.
	readsBefore := s.reads()
	second := s.next(t)
	require.Equal(t, "5", second.lastEventID, "EventSource resumes after the last event")
	hold := make(chan struct{})
	second.answer <- s.events(hold, postEvent(6, "after the drop"), postEvent(5, "live one"))
	page.WaitFor("the post after the drop", `document.querySelector('#feed > li:first-child')?.dataset.id === '6'`)
	page.WaitFor("the page live again", `document.getElementById('live-state').dataset.state === 'live'`)
	require.Equal(t, []int64{6, 5}, browser.Eval[[]int64](page, `[...document.querySelectorAll('#feed > li')].map(li => Number(li.dataset.id))`),
		"a repeated post is shown once; a removed one stays away")
	require.Eventually(t, func() bool { return s.reads() > readsBefore }, browser.Timeout, 10*time.Millisecond,
		"after a reconnection the page reads its first page again, for what a resume cannot repeat (removals)")

	// Reading the feed again from the top (after a follow) believes the
	// server: a post that left the feed may be back in it.
	page.Click(`#nav a[data-view="people"]`)
	page.Fill("#follow-user", "9")
	page.Click("#follow")
	page.Click(`#nav a[data-view="feed"]`)
	page.WaitFor("the post back after the feed was read again", `document.querySelector('#feed > li[data-id="3"]') !== null`)

	// The stream alone refuses (over the per-user limit, say), saying when
	// to come back: EventSource gives up without saying why; the page asks,
	// tells the reader in plain words (the server's speak of configuration
	// keys, to operators), counts down, and waits as long as Retry-After
	// says: longer than it would wait by itself (2 s after a connection
	// that was open).
	close(hold)
	const tooMany = "you have as many live streams open as you may (stream.max_per_user); close one, or try again in 3 s"
	s.next(t).answer <- refuseAfter(http.StatusTooManyRequests, "rate_limited", tooMany, "3")
	// The page's own look, which it waits from: after this moment.
	refused := time.Now()
	s.next(t).answer <- refuseAfter(http.StatusTooManyRequests, "rate_limited", tooMany, "3")
	page.WaitFor("the pause, told in plain words", textMatches("#live-state",
		`^Live updates paused, retrying in 3 s\. Too many of your tabs or windows are live at once\.$`))
	page.Screenshot("live-updates-paused.png")
	page.WaitFor("the count down", textMatches("#live-state", `^Live updates paused, retrying in 1 s\. `))

	// It tries again once Retry-After has passed, resuming from the newest
	// post it shows.
	third := s.next(t)
	waited := time.Since(refused)
	require.GreaterOrEqual(t, waited, 3*time.Second, "the page came back %s after a Retry-After of 3 s", waited)
	require.Equal(t, "6", third.queryID, "a new connection resumes from the newest post shown")

	// The server is full: the same, in other words, for as long as it says.
	third.answer <- refuseAfter(http.StatusServiceUnavailable, "unavailable",
		"this server holds as many live streams as it may; try again later", "1")
	s.next(t).answer <- refuseAfter(http.StatusServiceUnavailable, "unavailable",
		"this server holds as many live streams as it may; try again later", "1")
	page.WaitFor("the pause, told in plain words", textMatches("#live-state",
		`^Live updates paused, retrying in 1 s\. The server is busy\.$`))

	fourth := s.next(t)
	fourth.answer <- refuse(http.StatusUnauthorized, "unauthenticated", "missing or invalid bearer token")
	s.next(t).answer <- refuse(http.StatusUnauthorized, "unauthenticated", "missing or invalid bearer token")
	page.WaitFor("the sign-in form, with the reason", `!document.getElementById('sign-in').hidden &&
		document.getElementById('sign-in-error').textContent === 'The server refused the token (missing or invalid bearer token). Sign in again.'`)
	page.RequireNoExceptions()
}

// A stream's catch-up also brings entries older than the page's newest —
// a followee's history, merged by a follow — which the page never read:
// each goes where its id puts it, and only an entry that goes on top is
// news for the live region. (A catch-up right after a live post once left
// the region saying "New post" of a months-old one.)
func TestOlderLiveEntriesAreNotAnnounced(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	page := signedIn(t, b, s)
	conn := s.next(t)
	page.WaitFor("the first page", `document.querySelector('#feed > li[data-id="3"]') !== null`)

	older, _ := json.Marshal(map[string]any{"id": 2, "author_id": 9, "body": "from the followee's history", "created_at": "2026-11-01T09:00:00Z"})
	hold := make(chan struct{})
	defer close(hold)
	conn.answer <- s.events(hold, postEvent(5, "live one"), "event: post\ndata: "+string(older)+"\n\n")
	page.WaitFor("the older entry below the page's", `document.querySelector('#feed > li:last-child')?.dataset.id === '2'`)
	require.Equal(t, []int64{5, 3, 2}, browser.Eval[[]int64](page, `[...document.querySelectorAll('#feed > li')].map(li => Number(li.dataset.id))`))
	require.Equal(t, "New post from user 9: live one", page.Text("#announcer"), "the live region says the post on top, not the older one after it")
}

// Older entries that a catch-up brings while older pages are still to be
// read go nowhere yet: the pager brings them in their place. (The whole
// history once showed before the reader scrolled, when a catch-up came
// right after a follow.)
func TestOlderLiveEntriesWaitForTheirPage(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	var first []any // a page that fills the screen: the pager waits for a scroll
	for id := 100; id > 70; id-- {
		first = append(first, post(id, "2026-12-01T08:00:00Z"))
	}
	s.setFeed(func() []any { return first })
	s.mu.Lock()
	s.older = []any{post(70, "2026-11-30T08:00:00Z"), post(69, "2026-11-30T08:00:00Z")}
	s.mu.Unlock()
	page := signedIn(t, b, s)
	evs := make(chan string)
	s.next(t).answer <- s.eventsFrom(evs)
	page.WaitFor("the first page, live", `document.querySelectorAll('#feed > li').length === 30 &&
		document.getElementById('live-state').dataset.state === 'live'`)

	evs <- "event: post\ndata: " + mustJSON(t, post(69, "2026-11-30T08:00:00Z")) + "\n\n"
	evs <- postEvent(101, "live one")
	page.WaitFor("the live post on top", `document.querySelector('#feed > li:first-child')?.dataset.id === '101'`)
	ids := feedIDs(page)
	require.Len(t, ids, 31, "the older entry waits for its page: %v", ids)
	require.Equal(t, 71, ids[30])
	require.Equal(t, "New post from user 9: live one", page.Text("#announcer"))

	browser.Eval[bool](page, `(window.scrollTo(0, document.body.scrollHeight), true)`)
	page.WaitFor("the older page", `document.querySelector('#feed > li[data-id="69"]') !== null`)
	ids = feedIDs(page)
	require.Equal(t, []int{71, 70, 69}, ids[len(ids)-3:], "each in its place, once")
	require.Len(t, ids, 33)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}
