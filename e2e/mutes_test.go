package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMuteHidesFromTheFirstRead: a mute hides the muted user's posts and
// reposts, and the reposts of their posts, from the first read after the
// 204, and the live stream removes those it had sent and sends none of
// theirs after it; the follow stays. An unmute shows them again, in the
// feed and in the stream, from the first read after its 204.
func TestMuteHidesFromTheFirstRead(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	all := c.start("all")
	const reader, muted, other, stranger = 1, 2, 3, 4
	rd, m, n, x := all.client(reader), all.client(muted), all.client(other), all.client(stranger)
	rd.follow(muted)
	rd.follow(other)
	c.waitOutboxDrained(30 * time.Second)
	require.Empty(t, rd.feed())
	st := rd.openStream(t) // before anything is posted: it sends every entry

	m1 := m.post("M's first")
	x1 := x.post("a stranger's post")
	mx := m.repost(x1.ID, x1.ID) // shows: the reader does not follow the stranger
	n1 := n.post("N's first")
	n.repost(m1.ID, m1.ID) // a repeat: m1 shows
	m.repost(n1.ID, n1.ID) // a repeat: n1 shows
	m2 := m.post("M's second")
	c.waitOutboxDrained(30 * time.Second)
	before := newestFirst([]post{m1, mx, n1, m2})
	require.Equal(t, before, ids(rd.feed()...))
	st.awaitShown(before...)
	require.Equal(t, before, st.ids(), "the stream shows the feed")
	sent := len(st.log)

	rd.expect("PUT", "/v1/mutes/"+itoa(muted), http.StatusNoContent)
	for _, limit := range []int{1, 100} {
		var got []int64
		for _, raw := range rd.feedItems(limit) {
			var p post
			require.NoError(t, json.Unmarshal(raw, &p))
			got = append(got, p.ID)
		}
		require.Equal(t, []int64{n1.ID}, got, "the first read after the mute, in pages of %d: N's post, whose repost by M was a repeat", limit)
	}
	rd.expect("PUT", "/v1/mutes/"+itoa(muted), http.StatusNoContent) // idempotent
	rd.expectError("PUT", "/v1/mutes/"+itoa(reader), http.StatusUnprocessableEntity, "invalid_argument")
	var mutes followPage
	require.NoError(t, json.Unmarshal(rd.expect("GET", "/v1/mutes", http.StatusOK), &mutes))
	require.Len(t, mutes.Items, 1)
	require.EqualValues(t, muted, mutes.Items[0].UserID)
	var following followPage
	require.NoError(t, json.Unmarshal(rd.expect("GET", "/v1/users/"+itoa(reader)+"/following", http.StatusOK), &following))
	require.ElementsMatch(t, []int64{muted, other}, following.userIDs(), "a mute leaves the follows")
	m.expect("GET", "/v1/posts/"+itoa(m1.ID), http.StatusOK)
	rd.expect("GET", "/v1/posts/"+itoa(m1.ID), http.StatusOK) // a mute is no block

	st.await("a remove of every entry of the muted user's", func() bool {
		for _, p := range st.view {
			if involves(p, muted) {
				return false
			}
		}
		return true
	})
	// After the mute, M posts and N reposts it: neither comes; N's next
	// post does, and is the only post event since the mute.
	m3 := m.post("M's third, muted")
	n.repost(m3.ID, m3.ID)
	c.waitOutboxDrained(30 * time.Second)
	n2 := n.post("N's second")
	st.awaitShown(n2.ID)
	require.Equal(t, []int64{n2.ID}, ids(st.postsSince(sent)...), "post events since the mute")
	require.Equal(t, []int64{n2.ID, n1.ID}, ids(rd.feed()...))
	require.Equal(t, []int64{n2.ID, n1.ID}, st.ids(), "the stream shows the feed")

	rd.expect("DELETE", "/v1/mutes/"+itoa(muted), http.StatusNoContent)
	after := newestFirst([]post{m1, mx, n1, m2, m3, n2})
	require.Equal(t, after, ids(rd.feed()...), "the first read after the unmute shows M's entries again")
	rd.expect("DELETE", "/v1/mutes/"+itoa(muted), http.StatusNoContent) // idempotent
	require.NoError(t, json.Unmarshal(rd.expect("GET", "/v1/mutes", http.StatusOK), &mutes))
	require.Empty(t, mutes.Items)
	st.awaitShown(after...)
	require.Equal(t, after, st.ids(), "the stream shows the feed again")
}

// followPage is a page of {"user_id", "since"}: follows, mutes, blocks.
type followPage struct {
	Items []struct {
		UserID int64  `json:"user_id"`
		Since  string `json:"since"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func (p followPage) userIDs() []int64 {
	out := make([]int64, len(p.Items))
	for i, it := range p.Items {
		out[i] = it.UserID
	}
	return out
}
