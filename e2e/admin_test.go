package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/browser"
)

// adminToken is admin.token of the operator console's tests.
const adminToken = "e2e-admin-token-5f0c2a9d81b7"

// TestOperatorConsoleRetriesADeadEvent: an event whose post does not exist
// dies after outbox.max_attempts; the operator console of the process
// shows it with its error; once the cause is fixed, a click on its retry
// button makes it pending again, and the post is delivered to every
// follower's feed. On the way: a wrong token is refused with the API's
// message, the charts draw the process's deliveries, the streams and the
// configuration (its secrets masked) are shown, and the page fits a phone.
func TestOperatorConsoleRetriesADeadEvent(t *testing.T) {
	b := browser.Start(t)
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_MAX_ATTEMPTS=2", "NEWSFEED_OUTBOX_BACKOFF_BASE=50ms",
		"NEWSFEED_ADMIN_TOKEN="+adminToken))
	all := c.start("all", "--concurrency", "4")
	ctx := context.Background()

	const author, missingPost = int64(1), int64(900_000)
	followers := c.seedFollowers(author, 100, 5)
	c.markFeedsBuilt(followers)

	// John posts now and then, so that the charts have deliveries to draw.
	john := all.client(author)
	stopPosting := make(chan struct{})
	var posting sync.WaitGroup
	posting.Add(1)
	go func() {
		defer posting.Done()
		for i := 0; ; i++ {
			select {
			case <-stopPosting:
				return
			case <-time.After(400 * time.Millisecond):
			}
			john.tryPost("a post for the charts "+strconv.Itoa(i), "charts-"+strconv.Itoa(i))
		}
	}()
	stop := sync.OnceFunc(func() { close(stopPosting); posting.Wait() })
	t.Cleanup(stop)

	var poison int64
	require.NoError(t, c.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload) VALUES
		('post.created', jsonb_build_object('post_id', $1::bigint, 'author_id', $2::bigint)) RETURNING id`,
		missingPost, author).Scan(&poison))
	require.Eventually(t, func() bool { return c.outboxStatus(poison) == "dead" }, 90*time.Second, 50*time.Millisecond)
	event := fmt.Sprintf(`#dead-events li[data-id="%d"]`, poison)

	page := b.NewPage("operator")
	page.Navigate("http://" + all.metricsAddr + "/admin")
	page.WaitFor("the sign-in form", `!document.getElementById('sign-in').hidden`)
	page.Fill("#token", "not-the-admin-token")
	page.Click("#token-form button[type=submit]")
	page.WaitFor("the refusal, in the API's words", alertShows("sign-in-error", "the token is not admin.token"))
	// With the keyboard: the token, then Enter.
	page.Fill("#token", adminToken)
	page.Keys("\r")
	page.WaitFor("the console", `!document.getElementById('console').hidden && document.getElementById('sign-in').hidden`)
	require.Contains(t, page.Text("#process"), "serve + dispatch + work")

	page.WaitFor("the dead event in the console", fmt.Sprintf(`document.querySelector(%s) !== null`, browser.JS(event)))
	require.Contains(t, page.Text(event+" .last-error"), "does not exist")
	require.Equal(t, "post 900000", page.Text(event+" .about"))
	require.Equal(t, "post.created", page.Text(event+" .badge"))
	page.WaitFor("the outbox's dead count", textIs("#outbox-dead", "1"))
	require.Equal(t, "1 dead event.", page.Text("#dead-summary"))
	page.WaitFor("the partition of the ticket stream", `document.querySelector('#partitions tr[data-partition="0"]') !== null`)
	require.Equal(t, "xxxxx", page.Text(`#config tr[data-key="admin.token"] .value`))
	require.Equal(t, "NEWSFEED_ADMIN_TOKEN", page.Text(`#config tr[data-key="admin.token"] .source`))
	require.False(t, browser.Eval[bool](page, fmt.Sprintf(`document.documentElement.outerHTML.includes(%s)`, browser.JS(adminToken))),
		"the token shown on the page")
	// Four samples with deliveries make a line worth a picture.
	page.WaitWithin(2*time.Minute, "the charts to draw lines of this process's deliveries",
		`[...document.querySelectorAll('#latency-chart polyline, #rate-chart polyline')].some(l => l.points.length >= 4)
		&& document.querySelector('#rate-chart polyline') !== null`)
	stop()
	page.Do("a wider window for the picture", chromedp.EmulateViewport(1280, 1060))
	page.WaitFor("the charts drawn at the new width", `document.querySelector('#latency-chart svg').getAttribute('width') > 500`)
	page.Screenshot("console.png") // docs/admin-console.png

	// The cause is fixed: the post exists. The operator retries.
	_, err := c.pool.Exec(ctx, `INSERT INTO posts (id, author_id, body) VALUES ($1, $2, 'restored')`, missingPost, author)
	require.NoError(t, err)
	page.Click(event + " button.retry")
	page.WaitFor("the retry confirmed", textIs("#retry-status",
		fmt.Sprintf("Event %d is pending again: a dispatcher publishes it next.", poison)))
	page.WaitFor("the event gone from the dead events", fmt.Sprintf(`document.querySelector(%s) === null`, browser.JS(event)))
	// The periodic refresh may take the event off the list before the
	// retry's own refresh does, and the focus moves after that one.
	page.WaitFor("the focus on what happened", `document.activeElement.id === 'retry-status'`)

	// Delivered: in every follower's feed in Redis, and first in the feed
	// a follower reads.
	require.Eventually(t, func() bool { return c.outboxStatus(poison) == "done" }, 90*time.Second, 50*time.Millisecond)
	require.Equal(t, len(followers), c.feedsHolding(followers, missingPost))
	items := all.client(followers[0]).firstPage(5)
	require.NotEmpty(t, items)
	require.Equal(t, missingPost, items[0].ID)
	page.WaitFor("no dead event left", textIs("#outbox-dead", "0")+" && "+textIs("#dead-summary", "No dead events."))

	// A phone's width: nothing wider than the screen; the tables scroll
	// in their own boxes.
	page.Do("emulate a phone", chromedp.EmulateViewport(375, 740, chromedp.EmulateMobile))
	page.WaitFor("the page to fit 375 px", `document.documentElement.scrollWidth <= document.documentElement.clientWidth`)
	require.Empty(t, browser.Eval[[]string](page,
		`[...document.querySelectorAll('input')].filter(el => el.labels.length === 0).map(el => el.id)`), "fields without a label")
	require.Empty(t, browser.Eval[[]string](page,
		`[...document.querySelectorAll('button')].filter(b => !(b.getAttribute('aria-label') || b.textContent.trim())).map(b => b.outerHTML)`),
		"buttons without a name")
	page.Screenshot("phone.png")
	page.RequireNoExceptions()
	require.Equal(t, 0, all.stop())
}

// TestOperatorConsoleWithRedisDown: `serve --dev` runs without Redis (its
// writes need PostgreSQL alone); its console, open without admin.token,
// shows the outbox and says in the streams' panel that Redis is
// unavailable, rather than failing the page.
func TestOperatorConsoleWithRedisDown(t *testing.T) {
	b := browser.Start(t)
	c := newCluster(t)
	p := c.startWith("serve", []string{"NEWSFEED_REDIS_URL=redis://127.0.0.1:1/0", "NEWSFEED_REDIS_CLUSTER=false"}, "--dev")
	p.client(1).post("written while Redis is down")

	page := b.NewPage("operator")
	page.Navigate("http://" + p.metricsAddr + "/admin")
	page.WaitFor("the console, open without a token", `!document.getElementById('console').hidden`)
	require.True(t, browser.Eval[bool](page, `document.getElementById('sign-in').hidden`), "no sign-in form")
	require.True(t, browser.Eval[bool](page, `!document.getElementById('open-badge').hidden`), "the page says it is open")
	page.WaitFor("the streams' panel to say Redis is down",
		`!document.getElementById('queue-error').hidden && document.getElementById('queue-error').textContent.startsWith('Redis is unavailable: ')`)
	page.WaitFor("the outbox counted all the same", textIs("#outbox-pending", "1"))
	require.True(t, browser.Eval[bool](page, `document.getElementById('outbox-error').hidden`))
	require.Equal(t, "serve · ", page.Text("#process")[:len("serve · ")])
	page.Screenshot("redis-down.png")
	page.RequireNoExceptions()
}
