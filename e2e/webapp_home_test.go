package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/browser"
)

// The web app's side of the home feed people expect (issue 23): own posts
// in the feed, the character count against posts.max_chars, deletes that
// are confirmed, reposts, mutes, blocks and users' pages, each on the
// built binary with the real servers, asserted on what the reader sees.

// TestWebAppOwnPostsCounterAndConfirm: a new user writes a post, counted
// against posts.max_chars; it shows on top of their feed, read again from
// the server too; deleting it asks first.
func TestWebAppOwnPostsCounterAndConfirm(t *testing.T) {
	b := browser.Start(t)
	c := newCluster(t, withEnv("NEWSFEED_POSTS_MAX_CHARS=40"))
	p := c.start("all", "--dev")
	const user = int64(6001)
	userAPI := p.client(user)

	page := openApp(t, b, p, "a new user")
	page.signInAsUser(user)
	page.waitListSettled("feed")
	require.Contains(t, page.Text("#feed-end"), "Your feed is empty")
	require.Equal(t, "0 / 40", page.Text("#post-count"), "the server's posts.max_chars")

	// Too long: counted as typed, refused by the page before the server.
	page.Fill("#post-body", strings.Repeat("é", 45))
	page.WaitFor("the count over the limit", textIs("#post-count", "45 / 40: 5 too many"))
	require.Equal(t, "true", browser.Eval[string](page.Page, `document.getElementById('post-body').getAttribute('aria-invalid')`))
	page.Screenshot("counter-over.png")
	page.Click("#compose-form button[type=submit]")
	page.WaitFor("the page's reason", alertShows("compose-error", "Your post is 45 characters long; the longest is 40. Shorten it by 5."))
	status, out := userAPI.do("GET", "/v1/users/6001/posts", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"items": [], "next_cursor": null}`, string(out), "nothing was sent")

	const text = "My first post, in my own feed"
	page.Fill("#post-body", text)
	page.WaitFor("the count", textIs("#post-count", strconv.Itoa(len(text))+" / 40"))
	page.Click("#compose-form button[type=submit]")
	page.WaitFor("the post to be confirmed", textIs("#compose-status", "Posted."))
	page.WaitFor("the post on top of the feed", textIs("#feed > li:first-child .body", text))
	require.Equal(t, "You have reached the end of your feed.", page.Text("#feed-end"), "not empty any more")
	require.Equal(t, "0 / 40", page.Text("#post-count"))
	page.Screenshot("own-post-in-feed.png")

	// The server has it in the feed too: a reload reads it from there.
	page.Navigate("http://" + p.httpAddr + "/")
	page.waitSignedIn(user)
	page.waitListSettled("feed")
	ids := page.postIDs("feed")
	require.Len(t, ids, 1)
	require.Equal(t, text, page.Text("#feed > li:first-child .body"))
	require.Equal(t, "now", page.Text("#feed > li:first-child header time"))
	require.Equal(t, "You (user 6001)", page.Text("#feed > li:first-child .author"))
	require.Zero(t, browser.Eval[int](page.Page, `document.querySelectorAll('#feed button.repost').length`),
		"no repost button on one's own post")

	// Delete asks first; cancelling keeps the post.
	page.Click("#feed > li:first-child button.delete")
	page.WaitFor("the confirmation", `document.getElementById('confirm').open`)
	require.Equal(t, "Delete this post?", page.Text("#confirm-title"))
	require.Contains(t, page.Text("#confirm-text"), text)
	page.Screenshot("confirm-delete.png")
	page.Click("#confirm-no")
	page.WaitFor("the dialog closed", `!document.getElementById('confirm').open`)
	require.Equal(t, ids, page.postIDs("feed"), "cancelled: the post stays")
	status, _ = userAPI.do("GET", "/v1/posts/"+strconv.FormatInt(ids[0], 10), nil)
	require.Equal(t, http.StatusOK, status, "cancelled: nothing deleted")

	page.Click("#feed > li:first-child button.delete")
	page.confirm("Delete this post?")
	page.WaitFor("the post gone", `document.querySelectorAll('#feed > li').length === 0`)
	page.WaitFor("the feed empty again", textIs("#feed-end", "Your feed is empty. Write a post, or follow someone under People, and posts show here."))
	status, _ = userAPI.do("GET", "/v1/posts/"+strconv.FormatInt(ids[0], 10), nil)
	require.Equal(t, http.StatusNotFound, status, "deleted, not only hidden")
	page.RequireNoExceptions()
}

// TestWebAppReposts: Bob reposts Alice's post from her page; Carol, who
// follows Bob, sees it live as "Reposted by User 4002" above Alice's post;
// once she follows Alice too, the post shows once; Bob undoes his repost.
func TestWebAppReposts(t *testing.T) {
	b := browser.Start(t)
	c := newCluster(t)
	p := c.start("all", "--dev")
	const alice, bob, carol = int64(4001), int64(4002), int64(4003)
	original := p.client(alice).post("Alice's post, worth passing on")
	carolAPI := p.client(carol)
	carolAPI.follow(bob)

	carolPage := openApp(t, b, p, "Carol")
	carolPage.signInAsUser(carol)
	carolPage.waitListSettled("feed")
	carolPage.WaitFor("Carol's page to be live", `document.getElementById('live-state').dataset.state === 'live'`)

	bobPage := openApp(t, b, p, "Bob")
	bobPage.signInAsUser(bob)
	bobPage.openUser(alice)
	entry := fmt.Sprintf(`#user-posts > li[data-id="%d"]`, original.ID)
	bobPage.WaitFor("Alice's post on her page", textIs(entry+" .body", original.Body))
	require.True(t, browser.Eval[bool](bobPage.Page, shown("#user-follow")), "Bob does not follow Alice")
	require.Zero(t, browser.Eval[int](bobPage.Page, `document.querySelectorAll('#user-posts button.delete').length`),
		"no delete on another's post")
	bobPage.Click(entry + " button.repost")
	bobPage.WaitFor("the repost confirmed", textIs("#user-status", "You reposted user 4001's post.")+" && "+
		textIs(entry+" button.repost", "Undo repost"))

	// In Bob's own feed, from the 201 on: he does not follow Alice.
	bobPage.view("feed")
	bobPage.WaitFor("Bob's repost on top of his feed", textStarts("#feed > li:first-child .reposted", "Reposted by you · ")+" && "+
		textIs("#feed > li:first-child .author", "User 4001")+" && "+textIs("#feed > li:first-child .body", original.Body))
	repostID := bobPage.postIDs("feed")[0]
	require.Greater(t, repostID, original.ID)

	// Live in Carol's feed, who follows Bob.
	carolPage.WaitFor("the repost on top of Carol's feed", textStarts("#feed > li:first-child .reposted", "Reposted by User 4002 · ")+" && "+
		textIs("#feed > li:first-child .author", "User 4001")+" && "+textIs("#feed > li:first-child .body", original.Body))
	require.Equal(t, []int64{repostID}, carolPage.postIDs("feed"))
	require.Equal(t, "Repost", carolPage.Text("#feed > li:first-child button.repost"), "Carol may repost it too")
	require.Contains(t, carolPage.Text("#announcer"), "User 4002 reposted user 4001: "+original.Body)
	carolPage.Screenshot("carol-sees-a-repost.png")

	// Carol opens Bob's page from his name: his repost is among his posts.
	carolPage.Click("#feed > li:first-child .reposted a.user")
	carolPage.waitUserPage(bob)
	// The list may still be on its way when the page shows (its busy mark
	// is set by the load, which starts a moment after).
	carolPage.WaitFor("Bob's repost among his posts", fmt.Sprintf(`[...document.querySelectorAll('#user-posts > li')].map(li => li.dataset.id).join() === '%d'`, repostID))
	require.True(t, browser.Eval[bool](carolPage.Page, shown("#user-unfollow")), "Carol follows Bob")
	carolPage.Screenshot("bob-s-page.png")

	// Carol follows Alice too: the post shows once, as itself (the first
	// of the two to arrive).
	carolPage.Click("#user-posts > li:first-child .author a.user")
	carolPage.waitUserPage(alice)
	carolPage.Click("#user-follow")
	carolPage.WaitFor("the follow confirmed", textIs("#user-status", "You follow user 4001 now.")+" && "+shown("#user-unfollow"))
	carolPage.view("feed")
	carolPage.WaitFor("the post once, as itself", fmt.Sprintf(`[...document.querySelectorAll('#feed > li')].map(li => li.dataset.id).join() === '%d'`, original.ID))
	require.Empty(t, carolPage.Text("#feed > li:first-child .reposted"))

	// Bob undoes his repost, from his feed, after a confirmation.
	bobPage.Click("#feed > li:first-child button.undo-repost")
	bobPage.confirm("Undo this repost?")
	bobPage.WaitFor("the repost gone from Bob's feed", `document.querySelectorAll('#feed > li').length === 0`)
	status, _ := p.client(bob).do("GET", "/v1/posts/"+strconv.FormatInt(repostID, 10), nil)
	require.Equal(t, http.StatusNotFound, status, "the repost is deleted")
	status, _ = p.client(bob).do("GET", "/v1/posts/"+strconv.FormatInt(original.ID, 10), nil)
	require.Equal(t, http.StatusOK, status, "the post itself stays")

	carolPage.RequireNoExceptions()
	bobPage.RequireNoExceptions()
}

// TestWebAppMutesBlocksAndUserPages: Dave follows Erin and Frank from
// their pages, mutes Erin from a post's menu and unmutes her on her page,
// blocks Frank, who then finds Dave's page closed to him, and unblocks.
func TestWebAppMutesBlocksAndUserPages(t *testing.T) {
	b := browser.Start(t)
	c := newCluster(t)
	p := c.start("all", "--dev")
	const dave, erin, frank = int64(5001), int64(5002), int64(5003)
	erinPost := p.client(erin).post("Erin talks a lot")
	frankPost := p.client(frank).post("Frank, whom Dave will block")
	davePost := p.client(dave).post("Dave's own post")
	base := "http://" + p.httpAddr

	davePage := openApp(t, b, p, "Dave")
	davePage.signInAsUser(dave)
	for _, u := range []int64{erin, frank} {
		davePage.openUser(u)
		require.True(t, browser.Eval[bool](davePage.Page, shown("#user-follow")+" && "+shown("#user-mute")+" && "+shown("#user-block")))
		require.False(t, browser.Eval[bool](davePage.Page, shown("#user-unfollow")+" || "+shown("#user-unmute")+" || "+shown("#user-unblock")),
			"Dave neither follows, mutes nor blocks user %d yet", u)
		davePage.Click("#user-follow")
		davePage.WaitFor("the follow confirmed", textIs("#user-status", fmt.Sprintf("You follow user %d now.", u))+" && "+shown("#user-unfollow")+
			" && document.activeElement.id === 'user-unfollow'")
	}
	davePage.view("feed")
	all := fmt.Sprintf("%d,%d,%d", davePost.ID, frankPost.ID, erinPost.ID)
	davePage.WaitFor("Dave's feed: his own post and theirs", fmt.Sprintf(`[...document.querySelectorAll('#feed > li')].map(li => li.dataset.id).join() === %q`, all))

	// Mute Erin from her post's menu: her post leaves at once, and stays
	// away when the feed is read again.
	erinEntry := fmt.Sprintf(`#feed > li[data-id="%d"]`, erinPost.ID)
	davePage.Click(erinEntry + " details.menu summary")
	davePage.WaitFor("the menu open", shown(erinEntry+" details.menu[open] button.mute"))
	davePage.Screenshot("author-menu.png")
	davePage.Click(fmt.Sprintf(`%s details.menu button.mute[data-user="%d"]`, erinEntry, erin))
	davePage.WaitFor("Erin's post gone", fmt.Sprintf(`document.querySelector(%s) === null`, browser.JS(erinEntry)))
	require.Equal(t, "You muted user 5002: their posts and reposts stay out of your feed. Undo it on their page.", davePage.Text("#feed-status"))
	davePage.Navigate(base + "/")
	davePage.waitSignedIn(dave)
	davePage.waitListSettled("feed")
	require.Equal(t, []int64{davePost.ID, frankPost.ID}, davePage.postIDs("feed"), "muted on the server")

	// Erin's page, from her name in the list of whom Dave follows: muted,
	// followed, her posts listed; unmute there brings her back.
	davePage.view("people")
	davePage.WaitFor("Erin among whom Dave follows", `document.querySelector('#following li[data-user="5002"] a.user') !== null`)
	davePage.Click(`#following li[data-user="5002"] a.user`)
	davePage.waitUserPage(erin)
	require.Equal(t, "You muted user 5002: their posts and reposts stay out of your home feed.", davePage.Text("#user-note"))
	require.True(t, browser.Eval[bool](davePage.Page, shown("#user-unmute")+" && "+shown("#user-unfollow")+" && "+shown("#user-block")))
	require.False(t, browser.Eval[bool](davePage.Page, shown("#user-mute")))
	require.Equal(t, erinPost.Body, davePage.Text(`#user-posts > li:first-child .body`))
	davePage.Screenshot("muted-user-page.png")
	davePage.Click("#user-unmute")
	davePage.WaitFor("the unmute confirmed", textIs("#user-status", "You unmuted user 5002.")+" && "+shown("#user-mute")+
		` && document.getElementById('user-note').hidden`)
	davePage.view("feed")
	davePage.WaitFor("Erin's post back", fmt.Sprintf(`[...document.querySelectorAll('#feed > li')].map(li => li.dataset.id).join() === %q`, all))

	// Block Frank from his post's menu, after a confirmation.
	frankEntry := fmt.Sprintf(`#feed > li[data-id="%d"]`, frankPost.ID)
	davePage.menu(frankEntry, "block", frank)
	davePage.confirm("Block user 5003?")
	davePage.WaitFor("Frank's post gone", fmt.Sprintf(`document.querySelector(%s) === null`, browser.JS(frankEntry)))
	davePage.openUser(frank)
	require.Equal(t, "You blocked user 5003: neither of you sees the other's posts. Unblock to see them again.", davePage.Text("#user-note"))
	require.True(t, browser.Eval[bool](davePage.Page, shown("#user-unblock")+" && "+shown("#user-follow")), "the block removed the follow")
	require.False(t, browser.Eval[bool](davePage.Page, shown("#user-block")+" || "+shown("#user-unfollow")))
	require.Zero(t, browser.Eval[int](davePage.Page, `document.querySelectorAll('#user-posts > li').length`))
	davePage.Screenshot("blocked-user-page.png")

	// Frank finds Dave's page closed, and cannot follow him.
	frankPage := openApp(t, b, p, "Frank")
	frankPage.signInAsUser(frank)
	frankPage.waitListSettled("feed")
	frankToken := p.client(frank).token
	notFound := apiMessage(t, "GET", base+"/v1/users/5001/posts", frankToken, "", http.StatusNotFound)
	frankPage.openUser(dave)
	frankPage.WaitFor("the refusal of Dave's posts", alertShows("user-error", notFound))
	require.False(t, browser.Eval[bool](frankPage.Page, shown("#user-posts-more")+" || "+shown("#user-posts-end")),
		"nothing more to load, and no claim that Dave posted nothing")
	forbidden := apiMessage(t, "PUT", base+"/v1/following/5001", frankToken, "", http.StatusForbidden)
	frankPage.Click("#user-follow")
	frankPage.WaitFor("the refusal of the follow", alertShows("user-error", forbidden))
	frankPage.Screenshot("blocked-by-dave.png")

	// Dave unblocks: Frank's posts are on his page again; the follow the
	// block removed stays removed.
	davePage.Click("#user-unblock")
	davePage.WaitFor("the unblock confirmed", textIs("#user-status", "You unblocked user 5003.")+" && "+shown("#user-block")+
		" && "+shown("#user-follow"))
	davePage.WaitFor("Frank's posts on his page", textIs("#user-posts > li:first-child .body", frankPost.Body))
	davePage.view("feed")
	davePage.WaitFor("the feed without Frank", fmt.Sprintf(`[...document.querySelectorAll('#feed > li')].map(li => li.dataset.id).join() === '%d,%d'`,
		davePost.ID, erinPost.ID))

	davePage.RequireNoExceptions()
	frankPage.RequireNoExceptions()
}

// textStarts is an expression true when the element's text starts with
// prefix.
func textStarts(css, prefix string) string {
	return fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? '').startsWith(%s)`, browser.JS(css), browser.JS(prefix))
}
