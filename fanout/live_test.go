package fanout_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
)

// recordedLive records whom each post was announced to, and whose streams
// were told to read their feed again.
type recordedLive struct {
	mu     sync.Mutex
	pushed map[int64][]int64 // post → readers
	unsure []int64
}

func (l *recordedLive) Pushed(_ context.Context, postID, _ int64, followers []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pushed[postID] = append(l.pushed[postID], followers...)
}

func (l *recordedLive) announced(postID int64) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.pushed[postID])
	slices.Sort(out)
	return out
}

func (*recordedLive) Removed(context.Context, int64, []int64) {}

func (l *recordedLive) Unsure(_ context.Context, readers []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsure = append(l.unsure, readers...)
}

func (l *recordedLive) toldToReadAgain() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.unsure)
	slices.Sort(out)
	return slices.Compact(out)
}

func (*recordedLive) Pulled(context.Context, int64, int64)     {}
func (*recordedLive) Unpulled(context.Context, int64, int64)   {}
func (*recordedLive) Followed(context.Context, int64, int64)   {}
func (*recordedLive) Unfollowed(context.Context, int64, int64) {}
func (*recordedLive) Hid(context.Context, []int64)             {}

// TestLiveAnnouncesWhatTheFeedsTook: a fan-out read its page of followers,
// and before it pushed, one of them unfollowed the author (and the API
// applied it). That reader's feed refuses the post, and the live stream
// must not show it to them either: it would show a post the feed does not
// have, and no remove would follow.
func TestLiveAnnouncesWhatTheFeedsTook(t *testing.T) {
	t.Parallel()
	const author = int64(1)
	_, b := setup(t, fanout.Config{}, feed.Config{})
	readers := []int64{10, 11, 12}
	for _, r := range readers {
		_, err := b.db.Follow(t.Context(), r, author)
		require.NoError(t, err)
	}
	b.buildFeeds(t, readers)
	const gone = int64(11)
	var once sync.Once
	hooked := &hookedFeeds{Feeds: b.feeds, beforePush: func(ctx context.Context) error {
		var err error
		once.Do(func() {
			var ch domain.EdgeChange
			if ch, err = b.db.Unfollow(ctx, gone, author); err == nil {
				_, _, err = b.feeds.ApplyFollow(ctx, ch.EdgeState) // what the API does
			}
		})
		return err
	}}
	live := &recordedLive{pushed: map[int64][]int64{}}
	run(t, b.newWorker(t, hooked, fanout.Config{Live: live}))
	post := b.post(t, author)
	b.deliverAll(t)

	require.NotContains(t, b.feedPosts(t, gone), post, "the feed refused the post")
	require.Equal(t, []int64{10, 12}, live.announced(post), "the stream shows what the feed took")
	for _, r := range []int64{10, 12} {
		require.Contains(t, b.feedPosts(t, r), post)
	}
}

// TestLiveTellsReadersWhoFollowManyToReadAgain: a reader who follows more
// than FollowingThreshold keeps no feed, so no push announces a post to
// them; their streams are told to read again (which reads PostgreSQL),
// for a followee's post and for their own alike.
func TestLiveTellsReadersWhoFollowManyToReadAgain(t *testing.T) {
	t.Parallel()
	const author, many, few = int64(1), int64(10), int64(11)
	_, b := setup(t, fanout.Config{}, feed.Config{FollowingThreshold: 1})
	for _, e := range [][2]int64{{many, author}, {many, 2}, {few, author}} {
		_, err := b.db.Follow(t.Context(), e[0], e[1])
		require.NoError(t, err)
	}
	b.buildFeeds(t, []int64{many, few})
	require.False(t, b.feedExists(t, many), "no feed for one who follows 2")
	live := &recordedLive{pushed: map[int64][]int64{}}
	run(t, b.newWorker(t, b.feeds, fanout.Config{Live: live}))

	post := b.post(t, author)
	b.deliverAll(t)
	require.Equal(t, []int64{few}, live.announced(post))
	require.Contains(t, live.toldToReadAgain(), many)
	require.False(t, b.feedExists(t, many))

	live.mu.Lock()
	live.unsure = nil
	live.mu.Unlock()
	own := b.post(t, many)
	b.deliverAll(t)
	require.Empty(t, live.announced(own))
	require.Equal(t, []int64{many}, live.toldToReadAgain(), "their own post")
}
