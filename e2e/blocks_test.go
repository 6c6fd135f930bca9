package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

// blockMaxLen is feed.max_len of the block tests: small, so that a reader's
// feed goes past what Redis keeps, into PostgreSQL.
const blockMaxLen = 5

// The users of the block tests: A blocks B1, who follows A and C, and B2,
// who follows C alone (and so saw C's reposts of A's posts); D is someone
// whose posts A reposts.
const blocker, blocked1, blocked2, third, fourth = 1, 2, 3, 4, 5

// blockScene is a deployment where the block tests' users posted,
// reposted and read, before any block.
type blockScene struct {
	c *cluster
	// api is the process the users call: all, or serve beside workers.
	api *proc
	// workers are dispatch and work, when api is serve.
	workers []*proc
	// b1Post is B1's own post, in A's feed before the block.
	b1Post post
	// ofA are A's posts and reposts, and C's reposts of A's posts.
	ofA []post
	// cPosts are C's own posts, oldest first.
	cPosts []post
}

// newBlockScene starts `all` — or serve, dispatch and work, when
// separate — and has the users follow.
func newBlockScene(t *testing.T, c *cluster, separate bool) *blockScene {
	t.Helper()
	s := &blockScene{c: c}
	if separate {
		s.api = c.start("serve")
		s.workers = []*proc{c.start("dispatch"), c.start("work")}
	} else {
		s.api = c.start("all")
	}
	a, b1, b2 := s.client(blocker), s.client(blocked1), s.client(blocked2)
	b1.follow(blocker)
	b1.follow(third)
	b2.follow(third)
	a.follow(blocked1)
	c.waitOutboxDrained(30 * time.Second)
	for _, cl := range []*client{a, b1, b2} {
		require.Empty(t, cl.feed()) // the feeds are in Redis from here on
	}
	return s
}

func (s *blockScene) client(user int64) *client { return s.api.client(user) }

// post has the users post before the block: A posts and reposts D's posts,
// C reposts A's posts and posts more than blockMaxLen posts between them,
// so that A's entries lie both in the part of B1's feed that Redis holds
// and past it. It requires the feeds to be what the contract says, and
// returns what B1 and B2 see (newest first).
func (s *blockScene) post(t *testing.T) (b1Sees, b2Sees []int64) {
	t.Helper()
	a, b1, cc, d := s.client(blocker), s.client(blocked1), s.client(third), s.client(fourth)
	s.b1Post = b1.post("B1's post")
	// reposts of A's post by C, and A's reposts of D's posts.
	round := func(i int) {
		ap := a.post("A's post " + strconv.Itoa(i))
		dp := d.post("D's post " + strconv.Itoa(i))
		s.ofA = append(s.ofA, ap, cc.repost(ap.ID, ap.ID), a.repost(dp.ID, dp.ID))
	}
	round(1)
	for i := range blockMaxLen + 1 {
		s.cPosts = append(s.cPosts, cc.post("C's post "+strconv.Itoa(i)))
	}
	round(2)
	s.c.waitOutboxDrained(30 * time.Second)

	// B1 sees A's posts and reposts (not C's reposts of A's posts: the
	// originals show), C's posts and their own; B2 C's posts and reposts.
	for _, p := range s.ofA {
		if p.AuthorID == blocker {
			b1Sees = append(b1Sees, p.ID)
		} else {
			b2Sees = append(b2Sees, p.ID)
		}
	}
	b1Sees = append(append(b1Sees, ids(s.cPosts...)...), s.b1Post.ID)
	b2Sees = append(b2Sees, ids(s.cPosts...)...)
	slices.Sort(b1Sees)
	slices.Reverse(b1Sees)
	slices.Sort(b2Sees)
	slices.Reverse(b2Sees)
	require.Greater(t, len(b1Sees), blockMaxLen, "B1's feed goes past feed.max_len")
	require.Equal(t, b1Sees, ids(b1.feed()...), "B1's feed before the block")
	require.Equal(t, b2Sees, ids(s.client(blocked2).feed()...), "B2's feed before the block")
	return b1Sees, b2Sees
}

// requireSeesNothingOfBlocker requires reader's feed — in pages of 2 and of
// 100, through what Redis holds and past it — to be want, with nothing of
// A's in it; and every post of A's, or reposting one of A's, to be 404 to
// reader, to read and to repost.
func (s *blockScene) requireSeesNothingOfBlocker(t *testing.T, reader int64, want []int64, path string) {
	t.Helper()
	cl := s.client(reader)
	for _, limit := range []int{2, 100} {
		var got []int64
		for _, raw := range cl.feedItems(limit) {
			var p post
			require.NoError(t, json.Unmarshal(raw, &p))
			require.False(t, involves(p, blocker), "%s: user %d's feed shows %s of the blocker's", path, reader, raw)
			got = append(got, p.ID)
		}
		require.Equal(t, want, got, "%s: user %d's feed, in pages of %d", path, reader, limit)
	}
	for _, p := range s.ofA {
		cl.expectError("GET", "/v1/posts/"+itoa(p.ID), http.StatusNotFound, "not_found")
		cl.expectError("POST", "/v1/posts/"+itoa(p.ID)+"/reposts", http.StatusNotFound, "not_found")
	}
	cl.expectError("GET", "/v1/users/"+itoa(blocker)+"/posts", http.StatusNotFound, "not_found")
	cl.expectError("PUT", "/v1/following/"+itoa(blocker), http.StatusForbidden, "forbidden")
	s.client(blocker).expectError("PUT", "/v1/following/"+itoa(reader), http.StatusForbidden, "forbidden")
}

// TestBlockHidesTheBlocker: once A blocks B1 and B2, neither sees anything
// of A's from the first read after the 204, on any read path — their feed
// from Redis and past feed.max_len from PostgreSQL, rebuilt after Redis
// lost it, a post by its id, A's posts, reposting, the live stream — and
// no follow between them is possible either way; A no longer sees B1's
// post. Once with C's posts and reposts fanned out, once with C a
// celebrity, whose posts and reposts are merged into feeds at read time.
func TestBlockHidesTheBlocker(t *testing.T) {
	t.Parallel()
	for _, celebrity := range []bool{false, true} {
		name := "fanned out"
		if celebrity {
			name = "celebrity"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := []string{"NEWSFEED_FEED_MAX_LEN=" + strconv.Itoa(blockMaxLen)}
			if celebrity {
				env = append(env, "NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=3")
			}
			c := newCluster(t, withEnv(env...))
			if celebrity {
				c.seedFollowers(third, 1000, 5)
			}
			blockHidesTheBlocker(t, c)
		})
	}
}

func blockHidesTheBlocker(t *testing.T, c *cluster) {
	s := newBlockScene(t, c, false)
	a, cc, d := s.client(blocker), s.client(third), s.client(fourth)
	// The streams open before anything is posted: they send every entry.
	s1, s2 := s.client(blocked1).openStream(t), s.client(blocked2).openStream(t)
	b1Sees, b2Sees := s.post(t)
	s1.awaitShown(b1Sees...)
	s2.awaitShown(b2Sees...)
	require.Equal(t, b1Sees, s1.ids(), "B1's stream shows B1's feed")
	require.Equal(t, b2Sees, s2.ids(), "B2's stream shows B2's feed")
	before1, before2 := len(s1.log), len(s2.log)

	a.expect("PUT", "/v1/blocks/"+itoa(blocked1), http.StatusNoContent)
	a.expect("PUT", "/v1/blocks/"+itoa(blocked2), http.StatusNoContent)

	// What B1 and B2 see from the first read on: C's posts, and B1's own.
	b1Now := append(reversed(ids(s.cPosts...)), s.b1Post.ID)
	b2Now := reversed(ids(s.cPosts...))
	s.requireSeesNothingOfBlocker(t, blocked1, b1Now, "from Redis")
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "from Redis")
	// A sees no more of B1's, and lists both blocks, newest first.
	var aSees []int64
	for _, p := range s.ofA {
		if p.AuthorID == blocker {
			aSees = append([]int64{p.ID}, aSees...)
		}
	}
	require.Equal(t, aSees, ids(a.feed()...), "A's feed: A's own posts and reposts")
	a.expectError("GET", "/v1/posts/"+itoa(s.b1Post.ID), http.StatusNotFound, "not_found")
	a.expectError("GET", "/v1/users/"+itoa(blocked1)+"/posts", http.StatusNotFound, "not_found")
	a.expectError("POST", "/v1/posts/"+itoa(s.b1Post.ID)+"/reposts", http.StatusNotFound, "not_found")
	var blocks struct {
		Items []struct {
			UserID int64 `json:"user_id"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(a.expect("GET", "/v1/blocks", http.StatusOK), &blocks))
	require.Len(t, blocks.Items, 2)
	require.EqualValues(t, []int64{blocked2, blocked1}, []int64{blocks.Items[0].UserID, blocks.Items[1].UserID})
	// C's listing, to B2, has none of C's reposts of A's posts.
	var listing postPage
	require.NoError(t, json.Unmarshal(s.client(blocked2).expect("GET", "/v1/users/"+itoa(third)+"/posts?limit=100", http.StatusOK), &listing))
	for _, p := range listing.Items {
		require.False(t, involves(p, blocker), "C's posts, to B2, show post %d of the blocker's", p.ID)
	}

	// The feeds rebuilt from PostgreSQL after Redis lost them.
	dropper, err := feed.New(c.redis(), nil, feed.Config{Prefix: c.prefix, Cluster: c.onCluster})
	require.NoError(t, err)
	for _, u := range []int64{blocked1, blocked2} {
		require.NoError(t, dropper.Drop(context.Background(), u))
	}
	s.requireSeesNothingOfBlocker(t, blocked1, b1Now, "rebuilt")
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "rebuilt")

	// The streams removed what they had sent of A's.
	for _, st := range []*feedStream{s1, s2} {
		st.await("a remove of every entry of the blocker's", func() bool {
			for _, p := range st.view {
				if involves(p, blocker) {
					return false
				}
			}
			return true
		})
	}
	// A posts, reposts D's post, is reposted by C: none of it comes. A
	// post of C's after all that does, and is the only post event since
	// the block.
	ap := a.post("A's post after the block")
	cc.repost(ap.ID, ap.ID)
	dp := d.post("D's post after the block")
	a.repost(dp.ID, dp.ID)
	c.waitOutboxDrained(30 * time.Second)
	last := cc.post("C's post after the block")
	s1.awaitShown(last.ID)
	s2.awaitShown(last.ID)
	for i, st := range []*feedStream{s1, s2} {
		since := []int{before1, before2}[i]
		for _, p := range st.postsSince(since) {
			require.False(t, involves(p, blocker), "B%d's stream sent post %d of the blocker's after the block: %v", i+1, p.ID, st.log[since:])
		}
	}
	b1Now, b2Now = append([]int64{last.ID}, b1Now...), append([]int64{last.ID}, b2Now...)
	require.Equal(t, b1Now, ids(s.client(blocked1).feed()...))
	require.Equal(t, b2Now, ids(s.client(blocked2).feed()...))
	require.Equal(t, b1Now, s1.ids(), "B1's stream shows B1's feed")
	require.Equal(t, b2Now, s2.ids(), "B2's stream shows B2's feed")
}

// TestBlockHidesTheBlockerWithRedisDown: with Redis down, feeds are read
// from PostgreSQL, and show nothing of the blocker's either; posts and
// listings stay 404 and follows 403. A block asked for while Redis is down
// either holds from the first read after its 204 — from PostgreSQL, and
// from Redis once it is back, before any worker has handled the block's
// events — or is refused with 503 and changes nothing.
func TestBlockHidesTheBlockerWithRedisDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_FEED_MAX_LEN="+strconv.Itoa(blockMaxLen), "NEWSFEED_OUTBOX_BACKOFF_BASE=100ms"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	px := newProxy(t, redisURL.Host)
	viaProxy := *redisURL
	viaProxy.Host = px.addr
	c.env = append(c.env, "NEWSFEED_REDIS_URL="+viaProxy.String())

	s := newBlockScene(t, c, true)
	b1Sees, _ := s.post(t)
	a, b1 := s.client(blocker), s.client(blocked1)
	a.expect("PUT", "/v1/blocks/"+itoa(blocked2), http.StatusNoContent)
	b1Now := append(reversed(ids(s.cPosts...)), s.b1Post.ID)
	b2Now := reversed(ids(s.cPosts...))
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "Redis up")
	// From here on, only what serve does itself reaches the feeds: no
	// event is handled.
	for _, w := range s.workers {
		w.kill()
	}

	px.down()
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "Redis down")
	// B1 follows A: the block removes that follow too.
	status, out := a.do("PUT", "/v1/blocks/"+itoa(blocked1), nil)
	switch status {
	case http.StatusNoContent:
		s.requireSeesNothingOfBlocker(t, blocked1, b1Now, "Redis down")
	case http.StatusServiceUnavailable:
		// Nothing written: B1 is not blocked, and sees what they saw.
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(out, &e), "%s", out)
		require.Equal(t, "unavailable", e.Error.Code)
		var blocks followPage
		require.NoError(t, json.Unmarshal(a.expect("GET", "/v1/blocks", http.StatusOK), &blocks))
		require.Equal(t, []int64{blocked2}, blocks.userIDs(), "a refused block is not written")
		require.Equal(t, b1Sees, ids(b1.feed()...), "B1's feed, from PostgreSQL, after a refused block")
		b1.expect("GET", "/v1/posts/"+itoa(s.ofA[0].ID), http.StatusOK)
	default:
		t.Fatalf("PUT /v1/blocks with Redis down answered %d: %s", status, out)
	}

	px.up()
	require.Eventually(t, func() bool { return readyz(t, s.api.metricsAddr) == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "Redis back")
	if status == http.StatusServiceUnavailable {
		a.expect("PUT", "/v1/blocks/"+itoa(blocked1), http.StatusNoContent)
	}
	s.requireSeesNothingOfBlocker(t, blocked1, b1Now, "Redis back, no event handled")

	c.start("dispatch")
	c.start("work")
	c.waitOutboxDrained(30 * time.Second)
	s.requireSeesNothingOfBlocker(t, blocked1, b1Now, "every event handled")
	s.requireSeesNothingOfBlocker(t, blocked2, b2Now, "every event handled")
}
