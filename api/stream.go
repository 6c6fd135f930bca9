package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/logctx"
)

// GET /v1/feed/stream: the caller's home feed as Server-Sent Events.
//
// The stream is a view of the feed, and the feed is its truth: it starts
// from the feed (resuming after Last-Event-ID, or from its newest post), then
// takes what the live channel brings, and reads the top of the feed again
// whenever something may have been missed — shortly after it connects
// (workers learn of a new reader a moment later), after the channel was
// interrupted, and every StreamCatchUp. What it sends it remembers, so that
// nothing is sent twice.

// Live opens live subscriptions (live.Hub).
type Live interface {
	Subscribe(ctx context.Context, userID int64) (domain.LiveSubscription, error)
}

// Bounds of a stream's work.
const (
	// streamWriteTimeout: a client that takes longer to take one event is
	// gone.
	streamWriteTimeout = 10 * time.Second
	// catchUpPage and catchUpMax: a catch-up reads the feed's top in pages;
	// the resume reads down to its resume point, at most catchUpMax posts (a
	// resume after a long absence
	// sends the newest of what was missed).
	catchUpPage = 100
	catchUpMax  = 1000
	// unfollowRemovals bounds the removes sent after an unfollow: the
	// followee's newest posts, as many as a feed holds in Redis.
	unfollowRemovals = 1000
	// sentMemory bounds what a stream remembers having sent; past it the
	// oldest are forgotten and catch-ups look no lower.
	sentMemory = 4096
	// streamRetry is the reconnection delay the stream asks of EventSource.
	streamRetry = 2 * time.Second
	// streamRetryAfter is the Retry-After of a refused stream, in seconds.
	streamRetryAfter = 10
)

// settleAfter: reads of the feed shortly after a stream starts, for a post
// fanned out by a worker that did not know of the reader yet.
var settleAfter = []time.Duration{time.Second, 5 * time.Second}

// streamAuth authenticates the stream: the Authorization header, or the
// access_token query parameter that browsers' EventSource must use (it
// cannot set headers). Only this route takes a token in the query string.
func streamAuth(secret []byte) echo.MiddlewareFunc {
	bearer := authenticate(secret)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		checked := bearer(next)
		return func(c echo.Context) error {
			r := c.Request()
			if r.Header.Get(echo.HeaderAuthorization) == "" {
				q := r.URL.Query()
				if tokens := q["access_token"]; len(tokens) > 1 {
					return invalidArgument("access_token is given more than once")
				} else if len(tokens) == 1 {
					r.Header.Set(echo.HeaderAuthorization, "Bearer "+tokens[0])
				}
			}
			return checked(c)
		}
	}
}

// resumePoint is the post a stream resumes after: the Last-Event-ID header
// (what EventSource sends when it reconnects by itself) or else the
// last_event_id query parameter; 0 when neither is given.
func resumePoint(c echo.Context) (int64, error) {
	v := c.Request().Header.Get("Last-Event-ID")
	name := "Last-Event-ID"
	if v == "" {
		q := c.Request().URL.Query()["last_event_id"]
		if len(q) > 1 {
			return 0, invalidArgument("last_event_id is given more than once")
		}
		if len(q) == 1 {
			v, name = q[0], "last_event_id"
		}
	}
	if v == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || id < 0 {
		return 0, invalidArgument(name + " must be a post id (a whole number, 0 or more)")
	}
	return id, nil
}

func (s *Server) feedStream(c echo.Context) error {
	resume, err := resumePoint(c)
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	if s.cfg.Live == nil {
		return newError(http.StatusServiceUnavailable, "unavailable", "live streams are off in this process")
	}
	// Until its headers are sent a stream is a request like any other,
	// bounded by http.request_timeout (requestDeadline leaves it alone).
	opening, opened := context.WithTimeout(ctx, callBudget(s.cfg.RequestTimeout))
	defer opened()
	sub, err := s.cfg.Live.Subscribe(opening, me)
	switch {
	case errors.Is(err, domain.ErrTooManyStreams):
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return newError(http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("you have as many live streams open as you may (stream.max_per_user); close one, or try again in %d s", streamRetryAfter))
	case errors.Is(err, domain.ErrStreamsFull):
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return newError(http.StatusServiceUnavailable, "unavailable", "this server holds as many live streams as it may; try again later")
	case err != nil:
		return err
	}
	defer sub.Close()

	st := &stream{s: s, c: c, me: me, floor: resume, high: resume, sent: make(map[int64]bool), removed: make(map[int64]bool),
		unfollowed: make(map[int64]bool)}
	if resume == 0 {
		// Before the answer begins: what lands once the client sees it
		// open is above the start.
		st.startAtNewest(opening)
	}
	opened()
	st.rc = http.NewResponseController(c.Response())
	// A stream is one long response: the server's read timeout, meant for
	// requests, would end it.
	_ = st.rc.SetReadDeadline(time.Time{})
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies such as nginx: do not buffer
	c.Response().WriteHeader(http.StatusOK)
	// The start as the resume point from the first line on (an id alone
	// dispatches no event): a client whose stream ends before any post
	// reconnects from there, and misses nothing that came meanwhile.
	preamble := fmt.Sprintf("retry: %d\n", streamRetry.Milliseconds())
	if st.high > 0 {
		preamble += fmt.Sprintf("id: %d\n", st.high)
	}
	if err := st.write(preamble + "\n"); err != nil {
		return nil
	}
	if resume > 0 {
		if err := st.catchUp(ctx, catchUpMax); err != nil {
			return nil
		}
	}
	return st.run(ctx, sub)
}

// stream is one open stream's state.
type stream struct {
	s  *Server
	c  echo.Context
	rc *http.ResponseController
	me int64
	// floor: the client has (or does not want) every post at or below it;
	// high: the newest post sent, the id EventSource resumes from.
	floor, high int64
	sent        map[int64]bool
	removed     map[int64]bool
	unfollowed  map[int64]bool // authors unfollowed while the stream is open
	// unflushed: handleQueued flushes what write wrote, once.
	unflushed bool
}

func (st *stream) run(ctx context.Context, sub domain.LiveSubscription) error {
	cfg := st.s.cfg
	heartbeat := time.NewTicker(cfg.StreamHeartbeat)
	defer heartbeat.Stop()
	catchUp := time.NewTicker(cfg.StreamCatchUp)
	defer catchUp.Stop()
	end := time.NewTimer(cfg.StreamMaxDuration)
	defer end.Stop()
	settle := make(chan struct{}, len(cfg.streamSettleAfter))
	for _, d := range cfg.streamSettleAfter {
		t := time.AfterFunc(d, func() { settle <- struct{}{} })
		defer t.Stop()
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Gone():
			return nil // dropped: slow, or the server is stopping; the client resumes
		case <-end.C:
			return nil // stream.max_duration: reconnect through the balancer
		case <-heartbeat.C:
			err = st.write(": keep-alive\n\n")
		case <-settle:
			err = st.catchUp(ctx, catchUpPage)
		case <-catchUp.C:
			err = st.catchUp(ctx, catchUpPage)
		case ev := <-sub.Events():
			err = st.handleQueued(ctx, ev, sub.Events())
		}
		if err != nil {
			return nil // the client is gone; nothing to answer
		}
	}
}

// handleQueued handles ev and the events queued behind it, up to
// maxCoalesced, and flushes once: in a burst (a post to many streams every
// few milliseconds), a flush a stream and event was most of the live
// path's cost, and the events waited behind each other's write calls.
func (st *stream) handleQueued(ctx context.Context, ev domain.LiveEvent, events <-chan domain.LiveEvent) error {
	st.unflushed = true
	err := st.handle(ctx, ev)
queued:
	for n := 1; err == nil && n < maxCoalesced; n++ {
		select {
		case ev = <-events:
			err = st.handle(ctx, ev)
		default:
			break queued
		}
	}
	st.unflushed = false
	if err != nil {
		return err
	}
	return st.rc.Flush()
}

// maxCoalesced bounds the events a stream writes before it flushes.
const maxCoalesced = 64

func (st *stream) handle(ctx context.Context, ev domain.LiveEvent) error {
	switch ev.Kind {
	case domain.LivePost:
		return st.announced(ctx, ev.Post, ev.HidesChecked)
	case domain.LiveRemove:
		if err := st.sendRemoves([]int64{ev.PostID}); err != nil || ev.PostID > st.high {
			return err
		}
		// The entry may have shown an original that another entry (a
		// later repost) shows now.
		return st.resync(ctx)
	case domain.LiveFollowed:
		delete(st.unfollowed, ev.AuthorID)
		clear(st.removed) // a post removed by an unfollow may come back
		// The reposts of the followee's posts that showed before no longer
		// do: removed now. The followee's posts the follow merged are older
		// than what the client has; like any backfill, they come with the
		// next catch-up, not as news (a client reading its feed has them).
		return st.reconcile(ctx, false)
	case domain.LiveUnfollowed:
		// A fan-out that read its page of followers before the unfollow
		// still announces the author's posts the feed refused: not sent.
		st.unfollowed[ev.AuthorID] = true
		posts, err := st.s.posts.AuthorPosts(ctx, ev.AuthorID, 0, unfollowRemovals)
		if err != nil {
			logctx.From(ctx, st.s.log).Debug("stream cannot list an unfollowed author's posts", zap.Error(err))
			return st.resync(ctx)
		}
		// Only what the client may hold: a post newer than any sent never
		// reached it.
		ids := make([]int64, 0, len(posts))
		for _, p := range posts {
			if p.ID <= st.high {
				ids = append(ids, p.ID)
			}
		}
		if err := st.sendRemoves(ids); err != nil {
			return err
		}
		return st.resync(ctx) // a repost by someone else may show now
	case domain.LiveResync:
		return st.resync(ctx)
	case domain.LiveCatchUp:
		return st.catchUp(ctx, catchUpPage)
	}
	return nil
}

// announced sends a post that a fan-out put into the feed, if the feed
// shows it: not when the reader hides its author (their feed keeps it), and
// a repost only if its original shows through no earlier entry — which
// the feed's read knows, so a repost is sent by a catch-up. hidesChecked:
// the hub found that the feed does not hide the author (one round trip for
// all its streams).
func (st *stream) announced(ctx context.Context, p domain.Post, hidesChecked bool) error {
	author, original, ok := p.Authors()
	if ok && st.unfollowed[author] {
		return nil
	}
	if !ok || original != 0 {
		return st.catchUp(ctx, catchUpPage)
	}
	if hidesChecked {
		return st.sendPosts([]domain.Post{p})
	}
	hides, known, err := st.s.feeds.Hides(ctx, st.me)
	if err != nil || !known {
		return st.catchUp(ctx, catchUpPage) // the read rebuilds the feed, and knows
	}
	if _, hidden := slices.BinarySearch(hides, author); hidden {
		return nil
	}
	return st.sendPosts([]domain.Post{p})
}

// resync reads the top of the feed again, down to the oldest post the
// client holds from this stream (at most catchUpMax posts), and makes the
// client's view match it: a remove for each post it holds that the feed no
// longer shows (a mute, a block, an unfollow, a delete), then, oldest
// first, each post the feed shows that it does not hold (above the floor,
// or brought back: an unmute, a repost that shows now).
func (st *stream) resync(ctx context.Context) error { return st.reconcile(ctx, true) }

// reconcile is resync, sending only the removes unless add is set.
func (st *stream) reconcile(ctx context.Context, add bool) error {
	lowest := int64(math.MaxInt64)
	for id := range st.sent {
		lowest = min(lowest, id)
	}
	shown := make(map[int64]bool)
	var back []domain.Post
	last, end, read := int64(math.MaxInt64), false, 0
	for before := int64(0); read < catchUpMax; {
		p, err := st.s.feeds.Read(ctx, st.me, before, catchUpPage)
		if err != nil {
			logctx.From(ctx, st.s.log).Debug("stream cannot read its feed", zap.Error(err))
			return nil // the next catch-up tries again
		}
		for _, post := range p.Posts {
			shown[post.ID] = true
			last = post.ID
			read++
			// Not sent, and shown now: above the floor (new), brought back
			// (an unmute), or at or above the lowest post the client holds
			// from this stream (a repost that shows now in place of one
			// that left).
			if !st.sent[post.ID] && (post.ID > st.floor || st.removed[post.ID] || post.ID >= lowest) {
				back = append(back, post)
			}
		}
		if p.Next == 0 || len(p.Posts) == 0 {
			end = true
			break
		}
		if last <= lowest && last <= st.floor {
			break
		}
		before = p.Next
	}
	var gone []int64
	for id := range st.sent {
		if !shown[id] && (end || id > last) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	if err := st.sendRemoves(gone); err != nil {
		return err
	}
	if !add {
		return nil
	}
	for _, p := range back {
		delete(st.removed, p.ID)
	}
	slices.Reverse(back)
	return st.sendPosts(back)
}

// startAtNewest starts a stream without a resume point at the feed's newest
// post: the client has just read the feed, or wants what comes from now.
func (st *stream) startAtNewest(ctx context.Context) {
	p, err := st.s.feeds.Read(ctx, st.me, 0, catchUpPage)
	if err != nil {
		logctx.From(ctx, st.s.log).Debug("stream cannot read its feed", zap.Error(err))
		return // floor 0: the next catch-up sends the feed's top
	}
	if len(p.Posts) > 0 {
		st.floor, st.high = p.Posts[0].ID, p.Posts[0].ID
	}
	st.known(p.Posts)
}

// catchUp sends what the feed holds above the floor that was not sent,
// oldest first, reading at most depth posts down from the newest: the resume
// after Last-Event-ID reads down to its resume point (catchUpMax), every
// later check one page (what was missed lies near the top; reading down to
// the floor again each minute would read a whole busy feed per stream).
func (st *stream) catchUp(ctx context.Context, depth int) error {
	var missed []domain.Post
	read := 0
	for before := int64(0); read < depth; {
		p, err := st.s.feeds.Read(ctx, st.me, before, min(catchUpPage, depth-read))
		if err != nil {
			logctx.From(ctx, st.s.log).Debug("stream cannot read its feed", zap.Error(err))
			break // the next check tries again
		}
		done := false
		for i, post := range p.Posts {
			if post.ID <= st.floor {
				st.known(p.Posts[i:])
				done = true
				break
			}
			read++
			if !st.sent[post.ID] && !st.removed[post.ID] {
				missed = append(missed, post)
			}
		}
		if done || p.Next == 0 || len(p.Posts) == 0 {
			break
		}
		before = p.Next
	}
	slices.Reverse(missed)
	return st.sendPosts(missed)
}

// known records posts at or below the floor that the feed held when the
// stream read it: the client has them. Their announcement may still come
// (the fan-out announces a page just after writing it), and must not send
// them; a post that lands below the floor later is not among them, and is
// sent.
func (st *stream) known(posts []domain.Post) {
	for _, p := range posts {
		if p.ID <= st.floor {
			st.remember(p.ID)
		}
	}
}

// sendPosts writes posts not sent yet. A post newer than every post sent
// carries its id, from which EventSource resumes; one that arrived after a
// newer one (fan-outs finish in any order) carries none, so that the
// resume point never moves back and a reconnection repeats nothing.
func (st *stream) sendPosts(posts []domain.Post) error {
	var b strings.Builder
	for _, p := range posts {
		if st.sent[p.ID] || st.removed[p.ID] {
			continue
		}
		data, err := p.MarshalJSON()
		if err != nil {
			continue
		}
		b.WriteString("event: post\n")
		if p.ID > st.high {
			st.high = p.ID
			fmt.Fprintf(&b, "id: %d\n", p.ID)
		}
		b.WriteString("data: ")
		b.Write(data)
		b.WriteString("\n\n")
		st.remember(p.ID)
	}
	if b.Len() == 0 {
		return nil
	}
	return st.write(b.String())
}

func (st *stream) sendRemoves(ids []int64) error {
	var b strings.Builder
	for _, id := range ids {
		if st.removed[id] {
			continue
		}
		fmt.Fprintf(&b, "event: remove\ndata: {\"id\":%d}\n\n", id)
		delete(st.sent, id)
		st.removed[id] = true
	}
	if len(st.removed) > sentMemory {
		clear(st.removed) // a remove sent twice does no harm; a post after it is re-checked by the feed
	}
	if b.Len() == 0 {
		return nil
	}
	return st.write(b.String())
}

// remember records a sent post; past sentMemory, the oldest half is
// forgotten and the floor rises above it.
func (st *stream) remember(id int64) {
	st.sent[id] = true
	if len(st.sent) <= sentMemory {
		return
	}
	ids := make([]int64, 0, len(st.sent))
	for id := range st.sent {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids[:len(ids)/2] {
		delete(st.sent, id)
	}
	st.floor = max(st.floor, ids[len(ids)/2-1])
}

// write sends text and flushes it, within streamWriteTimeout; while
// handleQueued handles a run of events, the flush waits for its end.
func (st *stream) write(text string) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := io.WriteString(st.c.Response(), text); err != nil {
		return err
	}
	if st.unflushed {
		return nil
	}
	return st.rc.Flush()
}
