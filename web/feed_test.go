package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/browser"
)

// The home feed as the reader sees it, against the stream server of
// live_test.go, which gives the test the clock and the moment of every
// event: what the real server makes hard to pin down on purpose.

// signedIn opens the app of s in UTC and American English, so that the
// times it writes can be predicted, and signs in as user 7.
func signedIn(t *testing.T, b *browser.Browser, s *streamServer) *browser.Page {
	t.Helper()
	page := b.NewPage("reader")
	page.Do("emulate UTC and en-US", chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		if _, err := cdp.Call(ctx, target, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "UTC"}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, target, emulation.SetLocaleOverride, emulation.SetLocaleOverrideParams{Locale: "en_US"})
		return err
	}))
	page.Navigate(s.URL + "/")
	page.Fill("#dev-user", "7")
	page.Click("#dev-sign-in button[type=submit]")
	return page
}

func (s *streamServer) setFeed(feed func() []any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feed = feed
}

func post(id int, createdAt string) map[string]any {
	return map[string]any{"id": id, "author_id": 9, "body": fmt.Sprintf("post %d", id), "created_at": createdAt}
}

func feedIDs(page *browser.Page) []int {
	return browser.Eval[[]int](page, `[...document.querySelectorAll('#feed > li')].map(li => Number(li.dataset.id))`)
}

// TestTimesAreRelative: a post says how long ago it was written as a feed
// does, with the exact time as its title, and the page keeps it current.
func TestTimesAreRelative(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	const longAgo = "2025-03-14T15:09:00Z"
	s.setFeed(func() []any {
		ago := func(d time.Duration) string { return time.Now().Add(-d).UTC().Format(time.RFC3339Nano) }
		return []any{
			post(6, ago(50*time.Second)),
			post(5, ago(3*time.Minute+5*time.Second)),
			post(4, ago(2*time.Hour+time.Minute)),
			post(3, ago(5*24*time.Hour+time.Hour)),
			post(2, longAgo),
			// The server's clock a little ahead of the reader's.
			post(1, time.Now().Add(5*time.Second).UTC().Format(time.RFC3339Nano)),
		}
	})
	page := signedIn(t, b, s)
	s.next(t).answer <- s.events(make(chan struct{}))
	page.WaitFor("the feed", `document.querySelectorAll('#feed > li').length === 6`)

	times := func() []string {
		return browser.Eval[[]string](page, `[...document.querySelectorAll('#feed > li header time')].map(t => t.textContent)`)
	}
	require.Equal(t, []string{"now", "3 min", "2 h", "5 d", "Mar 14, 2025", "now"}, times())
	title := browser.Eval[string](page, `document.querySelector('#feed > li[data-id="2"] header time').title`)
	// Chromium's ICU writes a narrow no-break space before AM and PM.
	require.Equal(t, "Mar 14, 2025, 3:09 PM", strings.ReplaceAll(title, "\u202f", " "), "the exact time, on hover")
	require.Equal(t, longAgo, browser.Eval[string](page, `document.querySelector('#feed > li[data-id="2"] header time').dateTime`))
	page.Screenshot("relative-times.png")

	// Ten seconds later at most, "now" is "1 min": no reload needed.
	page.WaitFor("the newest post's time to move on", `document.querySelector('#feed > li[data-id="6"] header time').textContent === '1 min'`)
	page.RequireNoExceptions()
}

// TestLivePostsWaitBehindABar: a reader scrolled down into the feed is not
// moved by live posts: they wait behind a "N new posts" bar, which shows
// them on top when pressed, or when the reader scrolls back up.
func TestLivePostsWaitBehindABar(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	var posts []any
	for id := 100; id > 70; id-- {
		posts = append(posts, post(id, "2026-12-01T08:00:00Z"))
	}
	s.setFeed(func() []any { return posts })
	page := signedIn(t, b, s)
	evs := make(chan string)
	s.next(t).answer <- s.eventsFrom(evs)
	page.WaitFor("the feed, live", `document.querySelectorAll('#feed > li').length === 30 &&
		document.getElementById('live-state').dataset.state === 'live'`)

	// The reader scrolls down and reads a post in the middle of the screen.
	browser.Eval[bool](page, `(window.scrollTo(0, 1500), true)`)
	page.WaitFor("the reader down in the feed", `document.getElementById('feed').getBoundingClientRect().top < -500`)
	reading := `(() => { const li = [...document.querySelectorAll('#feed > li')].find(li => li.getBoundingClientRect().top >= 400);
		return li.dataset.id + ' at ' + Math.round(li.getBoundingClientRect().top); })()`
	before := browser.Eval[string](page, reading)

	evs <- postEvent(101, "first new")
	page.WaitFor("the bar", `!document.getElementById('feed-new').hidden &&
		document.getElementById('feed-new').textContent === '1 new post'`)
	evs <- postEvent(102, "second new")
	page.WaitFor("the bar, counting", `document.getElementById('feed-new').textContent === '2 new posts'`)
	evs <- "event: remove\ndata: {\"id\": 101}\n\n"
	page.WaitFor("a post that left before it was shown, uncounted", `document.getElementById('feed-new').textContent === '1 new post'`)
	evs <- postEvent(103, "third new")
	page.WaitFor("the bar, counting", `document.getElementById('feed-new').textContent === '2 new posts'`)
	require.Equal(t, before, browser.Eval[string](page, reading), "what the reader reads has not moved")
	require.Equal(t, 100, feedIDs(page)[0], "nothing new inserted yet")
	require.Equal(t, "2 new posts above.", page.Text("#announcer"))
	require.True(t, browser.Eval[bool](page, `(r => r.top >= 0 && r.bottom <= innerHeight)(document.getElementById('feed-new').getBoundingClientRect())`),
		"the bar in view, over the list")
	page.Screenshot("new-posts-bar.png")

	page.Click("#feed-new")
	page.WaitFor("the waiting posts on top", `[...document.querySelectorAll('#feed > li')].slice(0, 3).map(li => li.dataset.id).join() === '103,102,100'`)
	require.True(t, browser.Eval[bool](page, `document.getElementById('feed-new').hidden`), "the bar gone")
	page.WaitFor("the reader at the top of the feed", `document.getElementById('feed').getBoundingClientRect().top >= 0`)
	require.Equal(t, "103", browser.Eval[string](page, `document.activeElement.closest('li')?.dataset.id ?? ''`),
		"the focus on the newest post")
	page.Screenshot("new-posts-shown.png")

	// At the top, a live post goes on top at once.
	evs <- postEvent(104, "at the top")
	page.WaitFor("the live post on top", `document.querySelector('#feed > li:first-child').dataset.id === '104'`)
	require.True(t, browser.Eval[bool](page, `document.getElementById('feed-new').hidden`), "no bar at the top")

	// Down again, a post waits; back up by themselves, the reader finds it.
	browser.Eval[bool](page, `(window.scrollTo(0, 1500), true)`)
	page.WaitFor("the reader down in the feed", `document.getElementById('feed').getBoundingClientRect().top < -500`)
	evs <- postEvent(105, "while down again")
	page.WaitFor("the bar", `document.getElementById('feed-new').textContent === '1 new post' && !document.getElementById('feed-new').hidden`)
	browser.Eval[bool](page, `(window.scrollTo(0, 0), true)`)
	page.WaitFor("the waiting post on top", `document.querySelector('#feed > li:first-child').dataset.id === '105' &&
		document.getElementById('feed-new').hidden`)
	page.RequireNoExceptions()
}

func repostEvent(id, by int, original map[string]any) string {
	data, _ := json.Marshal(map[string]any{"id": id, "author_id": by, "created_at": "2026-12-01T09:00:00Z", "repost_of": original})
	return fmt.Sprintf("event: post\nid: %d\ndata: %s\n\n", id, data)
}

// TestEachPostShowsOnce: a repost shows as "Reposted by" above the post it
// reposts, and a post shows once however many entries bring it: as the
// entry with the lowest id, as the API's feed does, the next one taking
// its place when it goes.
func TestEachPostShowsOnce(t *testing.T) {
	b := browser.Start(t)
	s := newStreamServer(t)
	original := post(3, "2026-12-01T08:00:00Z")
	s.setFeed(func() []any {
		return []any{map[string]any{"id": 10, "author_id": 8, "created_at": "2026-12-01T08:30:00Z", "repost_of": original}}
	})
	page := signedIn(t, b, s)
	evs := make(chan string)
	s.next(t).answer <- s.eventsFrom(evs)
	page.WaitFor("the feed, live", `document.querySelectorAll('#feed > li').length === 1 &&
		document.getElementById('live-state').dataset.state === 'live'`)
	entry := `document.querySelector('#feed > li:first-child')`
	require.Equal(t, "Reposted by User 8 · 5 d", browser.Eval[string](page, entry+`.querySelector('.reposted').textContent`))
	require.Equal(t, "User 9", browser.Eval[string](page, entry+`.querySelector('.author').textContent`))
	require.Equal(t, "post 3", browser.Eval[string](page, entry+`.querySelector('.body').textContent`))
	require.Equal(t, "#user/8", browser.Eval[string](page, entry+`.querySelector('.reposted a').getAttribute('href')`),
		"the reposter's name opens their page")
	require.Equal(t, "#user/9", browser.Eval[string](page, entry+`.querySelector('.author a').getAttribute('href')`))
	require.Equal(t, "Repost", browser.Eval[string](page, entry+`.querySelector('button.repost').textContent`))
	require.Equal(t, []string{"Mute user 9", "Block user 9", "Mute user 8", "Block user 8"},
		browser.Eval[[]string](page, `[...document.querySelectorAll('#feed > li:first-child .menu-items button')].map(b => b.textContent)`),
		"the menu names both authors")
	page.Screenshot("a-repost.png")

	// Another repost of the same post, later: not shown again.
	evs <- repostEvent(12, 6, original)
	evs <- postEvent(13, "a marker, after it")
	page.WaitFor("the marker", `document.querySelector('#feed > li:first-child').dataset.id === '13'`)
	require.Equal(t, []int{13, 10}, feedIDs(page), "the post once, as the first entry that brought it")

	// The shown one goes; the server sends the next one, which shows.
	evs <- "event: remove\ndata: {\"id\": 10}\n\n"
	evs <- repostEvent(12, 6, original)
	page.WaitFor("the next repost in its place", `document.querySelector('#feed > li[data-id="12"] .reposted')?.textContent.startsWith('Reposted by User 6')`)
	require.Equal(t, []int{13, 12}, feedIDs(page))

	// The post itself, earlier than any repost of it, takes the place.
	evs <- postEvent(3, "post 3")
	page.WaitFor("the post itself", `document.querySelector('#feed > li[data-id="3"]') !== null`)
	require.Equal(t, []int{13, 3}, feedIDs(page))
	require.Empty(t, browser.Eval[string](page, `document.querySelector('#feed > li[data-id="3"] .reposted')?.textContent ?? ''`))
	page.RequireNoExceptions()
}
