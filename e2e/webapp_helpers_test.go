package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/browser"
)

// appPage is one user's tab on the web app a serve or all process serves.
type appPage struct {
	*browser.Page
	t *testing.T
}

// openApp opens the web app of p in a browser context of its own.
func openApp(t *testing.T, b *browser.Browser, p *proc, name string) *appPage {
	t.Helper()
	a := &appPage{Page: b.NewPage(name), t: t}
	a.Navigate("http://" + p.httpAddr + "/")
	a.WaitFor("the sign-in form (the app's script ran)", `!document.getElementById('sign-in').hidden`)
	return a
}

// signInAsUser signs in by user id, through the --dev token endpoint.
func (a *appPage) signInAsUser(id int64) {
	a.t.Helper()
	a.Fill("#dev-user", strconv.FormatInt(id, 10))
	a.Click("#dev-sign-in button[type=submit]")
	a.waitSignedIn(id)
}

// signInWithToken signs in by pasting a token.
func (a *appPage) signInWithToken(id int64, token string) {
	a.t.Helper()
	a.Fill("#token", token)
	a.Click("#token-sign-in button[type=submit]")
	a.waitSignedIn(id)
}

func (a *appPage) waitSignedIn(id int64) {
	a.t.Helper()
	a.WaitFor(fmt.Sprintf("the app signed in as user %d", id), fmt.Sprintf(
		`!document.getElementById('app').hidden && document.getElementById('whoami').textContent === 'user %d'`, id))
}

// view opens a view from the navigation: feed, mine or people.
func (a *appPage) view(name string) {
	a.t.Helper()
	a.Click(fmt.Sprintf(`#nav a[data-view=%q]`, name))
	a.WaitFor("the "+name+" view", fmt.Sprintf(`!document.getElementById('view-%s').hidden`, name))
}

// waitListSettled waits until a post list (feed or mine) has read a page
// and says whether there is more.
func (a *appPage) waitListSettled(list string) {
	a.t.Helper()
	a.WaitFor("the "+list+" list to load", fmt.Sprintf(`document.getElementById(%[1]q).getAttribute('aria-busy') === 'false'
		&& (!document.getElementById('%[1]s-more').hidden || !document.getElementById('%[1]s-end').hidden)`, list))
}

// postIDs returns the ids of the posts a list (feed or mine) shows, in
// the order shown.
func (a *appPage) postIDs(list string) []int64 {
	a.t.Helper()
	return browser.Eval[[]int64](a.Page, fmt.Sprintf(
		`[...document.querySelectorAll('#%s > li')].map(li => Number(li.dataset.id))`, list))
}

// scrollToEnd scrolls the feed down, as a reader would, until it has read
// its last page.
func (a *appPage) scrollToEnd(list string) {
	a.t.Helper()
	a.WaitFor("the end of the "+list+" after scrolling", fmt.Sprintf(
		`(window.scrollTo(0, document.documentElement.scrollHeight), !document.getElementById('%s-end').hidden)`, list))
}

// waitListed waits until the followers or following list shows user,
// showing the lists again every second, as a person would reload them: with
// database.read_url, another user's follow shows in a listing only once the
// replica has replayed it.
func (a *appPage) waitListed(what, list string, user int64) {
	a.t.Helper()
	a.WaitFor(what, fmt.Sprintf(`(() => {
		if (document.querySelector('#%s li[data-user="%d"]')) return true;
		const now = Date.now();
		if (!(now - (window.lastShown || 0) < 1000)) {
			window.lastShown = now;
			document.querySelector('#lists-form button[type=submit]').click();
		}
		return false;
	})()`, list, user))
}

// confirm waits for the confirmation dialog asking title, and confirms.
func (a *appPage) confirm(title string) {
	a.t.Helper()
	a.WaitFor("the dialog asking "+title, `document.getElementById('confirm').open && `+textIs("#confirm-title", title))
	a.Click("#confirm-yes")
	a.WaitFor("the dialog closed", `!document.getElementById('confirm').open`)
}

// openUser opens a user's page by its address, #user/ID, and waits for
// its posts (or the refusal to list them).
func (a *appPage) openUser(id int64) {
	a.t.Helper()
	browser.Eval[bool](a.Page, fmt.Sprintf(`(location.hash = '#user/%d', true)`, id))
	a.waitUserPage(id)
}

// waitUserPage waits until the page of user id shows, with where the
// signed-in user stands with them and their posts read.
func (a *appPage) waitUserPage(id int64) {
	a.t.Helper()
	a.WaitFor(fmt.Sprintf("the page of user %d", id), fmt.Sprintf(`!document.getElementById('view-user').hidden &&
		document.getElementById('user-title').textContent === 'User %d' && !document.getElementById('user-actions').hidden &&
		document.getElementById('user-posts').getAttribute('aria-busy') === 'false'`, id))
}

// shown is an expression true when the element the CSS selector finds
// exists and is not hidden.
func shown(css string) string {
	return fmt.Sprintf(`(el => el !== null && !el.hidden)(document.querySelector(%s))`, browser.JS(css))
}

// menu opens the menu of the authors of the entry the CSS selector finds
// and presses its item (mute or block) for user.
func (a *appPage) menu(entry, item string, user int64) {
	a.t.Helper()
	a.Click(entry + " details.menu summary")
	a.Click(fmt.Sprintf(`%s details.menu button.%s[data-user="%d"]`, entry, item, user))
}

// textIs is an expression true when the element's text is want.
func textIs(css, want string) string {
	return fmt.Sprintf(`document.querySelector(%s)?.textContent.trim() === %s`, browser.JS(css), browser.JS(want))
}

// alertShows is an expression true when an alert element is shown with
// the text want.
func alertShows(id, want string) string {
	return fmt.Sprintf(`!document.getElementById(%[1]s).hidden && document.getElementById(%[1]s).textContent === %[2]s`,
		browser.JS(id), browser.JS(want))
}

// apiMessage makes a request the way the page does and returns the message
// of the error body it gets, which the page must show as it is.
func apiMessage(t *testing.T, method, url, token, body string, wantStatus int) string {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	requireDescribed(t, req, []byte(body), resp, raw)
	require.Equal(t, wantStatus, resp.StatusCode, "%s %s", method, url)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &e))
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Message
}

// newestFirst returns the ids of posts, newest (highest id) first.
func newestFirst(posts []post) []int64 {
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}
