package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The home feed people expect (API.md, "What a home feed holds"): own
// posts and reposts from the 201 on, each original shown once, mutes and
// blocks hiding from the first read after the request, on every read path
// and in the live stream.

// expect sends method path as c and requires status want; it returns the
// answer's body.
func (c *client) expect(method, path string, want int) []byte {
	c.t.Helper()
	status, out := c.do(method, path, nil)
	require.Equal(c.t, want, status, "%s %s: %s", method, path, out)
	return out
}

// expectError is expect for an error answer, whose code it requires too.
func (c *client) expectError(method, path string, want int, code string) {
	c.t.Helper()
	out := c.expect(method, path, want)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(c.t, json.Unmarshal(out, &e), "%s", out)
	require.Equal(c.t, code, e.Error.Code, "%s %s: %s", method, path, out)
}

// repost reposts post id and requires 201 and a repost of original.
func (c *client) repost(id, original int64) post {
	c.t.Helper()
	out := c.expect("POST", "/v1/posts/"+itoa(id)+"/reposts", http.StatusCreated)
	requirePostShape(c.t, out)
	var p post
	require.NoError(c.t, json.Unmarshal(out, &p))
	require.NotNil(c.t, p.RepostOf, "%s", out)
	require.Equal(c.t, original, p.RepostOf.ID, "the repost's original: %s", out)
	return p
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// requirePostShape requires raw to be a post as the contract has it —
// {"id", "author_id", "body", "created_at"} — or a repost — {"id",
// "author_id", "created_at", "repost_of"} with no body, whose repost_of is a
// post, never a repost —, with every time in RFC 3339.
func requirePostShape(t testing.TB, raw []byte) {
	t.Helper()
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &fields), "%s", raw)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var createdAt string
	require.NoError(t, json.Unmarshal(fields["created_at"], &createdAt), "%s", raw)
	_, err := time.Parse(time.RFC3339Nano, createdAt)
	require.NoError(t, err, "created_at of %s", raw)
	if original, ok := fields["repost_of"]; ok {
		require.Equal(t, []string{"author_id", "created_at", "id", "repost_of"}, keys, "a repost: %s", raw)
		var of map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(original, &of), "%s", raw)
		require.NotContains(t, of, "repost_of", "repost_of is an original post, never a repost: %s", raw)
		requirePostShape(t, original)
		return
	}
	require.Equal(t, []string{"author_id", "body", "created_at", "id"}, keys, "a post: %s", raw)
}

// feedItems reads c's whole home feed in pages of limit, as raw items,
// each checked to be a post or a repost.
func (c *client) feedItems(limit int) []json.RawMessage {
	c.t.Helper()
	var all []json.RawMessage
	path := "/v1/feed?limit=" + strconv.Itoa(limit)
	for {
		out := c.expect("GET", path, http.StatusOK)
		var pg struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"next_cursor"`
		}
		require.NoError(c.t, json.Unmarshal(out, &pg))
		for _, it := range pg.Items {
			requirePostShape(c.t, it)
		}
		all = append(all, pg.Items...)
		if pg.NextCursor == nil {
			return all
		}
		path = "/v1/feed?limit=" + strconv.Itoa(limit) + "&cursor=" + *pg.NextCursor
	}
}

// involves reports whether p is by user or reposts a post by user.
func involves(p post, user int64) bool {
	return p.AuthorID == user || p.RepostOf != nil && p.RepostOf.AuthorID == user
}

// ids returns the ids of posts.
func ids(posts ...post) []int64 { return postIDs(posts) }

// TestRepostShownOnce: a reader who follows two reposters of a post sees
// the post once, through the entry with the lowest id — the original when
// they follow its author too, else the first repost; when that entry goes
// (deleted, unfollowed, muted, blocked), the next one shows, from the
// first read after the 204.
func TestRepostShownOnce(t *testing.T) {
	t.Parallel()
	const author, r1, r2, reader = 1, 2, 3, 4
	// start runs a deployment where the reader follows r1, r2 and (if
	// followsAuthor) the author, who posts; r1, then r2, repost the post.
	// It waits until the reader's feed in Redis holds every entry, so that
	// the next one is there to show when the shown one goes, and requires
	// the first read to show the post once, through want.
	start := func(t *testing.T, followsAuthor bool) (c *cluster, all *proc, original, rp1, rp2 post) {
		t.Helper()
		c = newCluster(t)
		all = c.start("all")
		rd := all.client(reader)
		followees := []int64{r1, r2}
		if followsAuthor {
			followees = append(followees, author)
		}
		for _, f := range followees {
			rd.follow(f)
		}
		// The follows' events are handled before the reader's first read,
		// which builds the feed that the fan-out then writes.
		c.waitOutboxDrained(30 * time.Second)
		require.Empty(t, rd.feed())

		original = all.client(author).post("the post")
		rp1 = all.client(r1).repost(original.ID, original.ID)
		rp2 = all.client(r2).repost(original.ID, original.ID)
		require.Less(t, rp1.ID, rp2.ID)
		c.waitOutboxDrained(30 * time.Second)
		held := []int64{rp1.ID, rp2.ID}
		want := rp1
		if followsAuthor {
			held, want = append(held, original.ID), original
		}
		for _, id := range held {
			require.Equal(t, 1, c.feedsHolding([]int64{reader}, id), "entry %d in the reader's feed in Redis", id)
		}
		require.Equal(t, ids(want), ids(rd.feed()...), "the post once, through entry %d", want.ID)
		return c, all, original, rp1, rp2
	}

	t.Run("delete", func(t *testing.T) {
		t.Parallel()
		_, all, original, rp1, rp2 := start(t, false)
		rd := all.client(reader)
		all.client(r1).expect("DELETE", "/v1/posts/"+itoa(rp1.ID), http.StatusNoContent)
		shown := rd.feed()
		require.Equal(t, ids(rp2), ids(shown...), "r2's repost shows once r1's is deleted")
		require.NotNil(t, shown[0].RepostOf)
		require.Equal(t, original.ID, shown[0].RepostOf.ID)
		all.client(author).expect("DELETE", "/v1/posts/"+itoa(original.ID), http.StatusNoContent)
		require.Empty(t, rd.feed(), "a deleted post hides every repost of it")
	})

	t.Run("unfollow", func(t *testing.T) {
		t.Parallel()
		_, all, _, rp1, rp2 := start(t, true)
		rd := all.client(reader)
		rd.expect("DELETE", "/v1/following/"+itoa(author), http.StatusNoContent)
		require.Equal(t, ids(rp1), ids(rd.feed()...), "r1's repost shows once the author is unfollowed")
		rd.expect("DELETE", "/v1/following/"+itoa(r1), http.StatusNoContent)
		require.Equal(t, ids(rp2), ids(rd.feed()...), "r2's repost shows once r1 is unfollowed")
	})

	t.Run("mute", func(t *testing.T) {
		t.Parallel()
		_, all, _, rp1, rp2 := start(t, false)
		rd := all.client(reader)
		rd.expect("PUT", "/v1/mutes/"+itoa(r1), http.StatusNoContent)
		require.Equal(t, ids(rp2), ids(rd.feed()...), "r2's repost shows once r1 is muted")
		rd.expect("DELETE", "/v1/mutes/"+itoa(r1), http.StatusNoContent)
		require.Equal(t, ids(rp1), ids(rd.feed()...), "r1's repost shows again once r1 is unmuted")
		rd.expect("PUT", "/v1/mutes/"+itoa(author), http.StatusNoContent)
		require.Empty(t, rd.feed(), "muting the original's author hides every repost of it")
	})

	t.Run("block", func(t *testing.T) {
		t.Parallel()
		_, all, _, _, rp2 := start(t, false)
		rd := all.client(reader)
		rd.expect("PUT", "/v1/blocks/"+itoa(r1), http.StatusNoContent)
		require.Equal(t, ids(rp2), ids(rd.feed()...), "r2's repost shows once the reader blocks r1")
		all.client(r2).expect("PUT", "/v1/blocks/"+itoa(reader), http.StatusNoContent)
		require.Empty(t, rd.feed(), "a block the other way hides r2's repost too")
	})
}

// TestOwnPostsAndRepostsFromThe201: a user's own posts and reposts are in
// their feed from the 201 on — with serve alone, no dispatcher and no
// worker, only the creating request can have put them there — a repost
// as {"id", "author_id", "created_at", "repost_of"} with no body; the
// fan-out that comes later adds nothing twice. Reposting again, or
// reposting a repost of the same post, returns the first repost with 200;
// one's own post cannot be reposted.
func TestOwnPostsAndRepostsFromThe201(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	serve := c.start("serve")
	const me, stranger, other, friend = 1, 2, 3, 4
	cl := serve.client(me)
	require.Empty(t, cl.feed()) // the feed is in Redis from here on

	theirs := serve.client(stranger).post("a stranger's post")
	var want []int64 // newest first
	for i := range 4 {
		p := cl.post("my post " + strconv.Itoa(i))
		want = append([]int64{p.ID}, want...)
		require.Equal(t, want, ids(cl.feed()...), "my posts, the newest from its 201 on")
		require.Equal(t, 1, c.feedsHolding([]int64{me}, p.ID), "put into my feed in Redis by the request")
	}
	mine := cl.repost(theirs.ID, theirs.ID)
	want = append([]int64{mine.ID}, want...)
	items := cl.feedItems(20)
	require.NotEmpty(t, items)
	var first post
	require.NoError(t, json.Unmarshal(items[0], &first))
	require.Equal(t, mine.ID, first.ID, "my repost first, from its 201 on: %s", items[0])
	require.EqualValues(t, me, first.AuthorID)
	require.Equal(t, theirs, *first.RepostOf, "the original in repost_of")
	require.Equal(t, want, ids(cl.feed()...))
	require.Equal(t, 1, c.feedsHolding([]int64{me}, mine.ID), "put into my feed in Redis by the request")

	// Read, reposted again, reposted through another's repost: the same one.
	out := cl.expect("GET", "/v1/posts/"+itoa(mine.ID), http.StatusOK)
	requirePostShape(t, out)
	var read post
	require.NoError(t, json.Unmarshal(out, &read))
	require.Equal(t, mine, read)
	out = cl.expect("POST", "/v1/posts/"+itoa(theirs.ID)+"/reposts", http.StatusOK)
	require.NoError(t, json.Unmarshal(out, &read))
	require.Equal(t, mine, read, "a second repost returns the first")
	viaOther := serve.client(other).repost(theirs.ID, theirs.ID)
	out = cl.expect("POST", "/v1/posts/"+itoa(viaOther.ID)+"/reposts", http.StatusOK)
	require.NoError(t, json.Unmarshal(out, &read))
	require.Equal(t, mine, read, "reposting a repost reposts its original, which I had reposted")
	// My own post, directly or through another's repost of it: 422.
	cl.expectError("POST", "/v1/posts/"+itoa(want[1])+"/reposts", http.StatusUnprocessableEntity, "invalid_argument")
	ofMine := serve.client(other).repost(want[1], want[1])
	cl.expectError("POST", "/v1/posts/"+itoa(ofMine.ID)+"/reposts", http.StatusUnprocessableEntity, "invalid_argument")
	require.Equal(t, want, ids(cl.feed()...), "nothing new in my feed")

	// The fan-out runs now, and pushes each into my feed again: once each.
	c.start("dispatch")
	c.start("work")
	c.waitOutboxDrained(30 * time.Second)
	require.Equal(t, want, ids(cl.feed()...), "each once after the fan-out")

	// A repost of a post that shows already (by someone I follow) adds no
	// second entry of it: the original, the lowest id, shows.
	cl.follow(friend)
	c.waitOutboxDrained(30 * time.Second)
	fp := serve.client(friend).post("a friend's post")
	c.waitOutboxDrained(30 * time.Second)
	cl.repost(fp.ID, fp.ID)
	require.Equal(t, append([]int64{fp.ID}, want...), ids(cl.feed()...), "the friend's post once, as itself")
}
