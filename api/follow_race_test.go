package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/internal/failpoint"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

// stall holds a request at failpoint.AfterCommit until the test lets it go.
type stall struct {
	reached, release chan struct{}
}

func newStall() *stall { return &stall{reached: make(chan struct{}), release: make(chan struct{})} }

func (s *stall) ctx() context.Context {
	return failpoint.With(context.Background(), func(ctx context.Context, p failpoint.Point) {
		if p != failpoint.AfterCommit {
			return
		}
		close(s.reached)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	})
}

// callIn is pipeline.call with the request under ctx.
func (m *pipeline) callIn(ctx context.Context, t *testing.T, as int64, method, path string, body ...string) *httptest.ResponseRecorder {
	t.Helper()
	tok, err := api.IssueToken(testSecret, as, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sent io.Reader
	if len(body) > 0 {
		sent = strings.NewReader(body[0])
	}
	req := httptest.NewRequestWithContext(ctx, method, path, sent)
	if sent != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	m.e.ServeHTTP(rec, req)
	return rec
}

// TestFollowRacingUnfollow: a follow stalls between its commit and its
// Redis step; the same user's unfollow commits, is applied and answers, and
// the events of both are handled; then the follow resumes. PostgreSQL says
// "not following": the feed must not show the author's posts — not after
// the follow answers, not once everything is delivered.
func TestFollowRacingUnfollow(t *testing.T) {
	t.Parallel()
	for _, celebrity := range []int64{0, 1} {
		t.Run("celebrity_threshold="+strconv.FormatInt(celebrity, 10), func(t *testing.T) {
			t.Parallel()
			rdb, prefix, cluster := testenv.NewUniversalRedis(t)
			m := startPipeline(t, testenv.NewPool(t), rdb, cluster, prefix, modelConfig{
				MaxLen: 40, Backfill: 50, ChunkSize: 1000, PageSize: 1000, CelebrityThreshold: celebrity,
			})
			const reader, author, other = 1, 2, 3
			m.expect(t, m.call(t, other, http.MethodPut, "/v1/following/"+strconv.Itoa(author)), http.StatusNoContent)
			posts := []int64{m.post(t, author), m.post(t, author)}
			m.deliver(t)
			m.readFrom(t, reader, 20, "", 0) // the reader's feed is in Redis

			s := newStall()
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- m.callIn(s.ctx(), t, reader, http.MethodPut, "/v1/following/"+strconv.Itoa(author)) }()
			<-s.reached
			m.expect(t, m.call(t, reader, http.MethodDelete, "/v1/following/"+strconv.Itoa(author)), http.StatusNoContent)
			m.deliver(t)
			close(s.release)
			m.expect(t, <-done, http.StatusNoContent)
			if got := m.readFrom(t, reader, 20, "", 0); len(got) != 0 {
				t.Fatalf("after the unfollow, the reader's feed shows %v (the unfollowed author's %v)", got, posts)
			}
			m.deliver(t)
			if got := m.readFrom(t, reader, 20, "", 0); len(got) != 0 {
				t.Fatalf("once every event is delivered, the reader's feed shows %v (the unfollowed author's %v)", got, posts)
			}
			// New posts of the author stay out too.
			m.post(t, author)
			m.deliver(t)
			if got := m.readFrom(t, reader, 20, "", 0); len(got) != 0 {
				t.Fatalf("a new post of the unfollowed author reached the feed: %v", got)
			}
		})
	}
}

// TestUnfollowRacingFollow is the mirror: an unfollow that found nothing to
// remove in PostgreSQL stalls before its Redis step; the same user's follow
// commits and is applied; then the unfollow resumes. PostgreSQL says
// "following": the author's posts, old and new, must be in the feed.
func TestUnfollowRacingFollow(t *testing.T) {
	t.Parallel()
	rdb, prefix, cluster := testenv.NewUniversalRedis(t)
	m := startPipeline(t, testenv.NewPool(t), rdb, cluster, prefix, modelConfig{
		MaxLen: 40, Backfill: 50, ChunkSize: 1000, PageSize: 1000,
	})
	const reader, author = 1, 2
	posts := []int64{m.post(t, author), m.post(t, author)}
	m.deliver(t)
	m.readFrom(t, reader, 20, "", 0)

	s := newStall()
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- m.callIn(s.ctx(), t, reader, http.MethodDelete, "/v1/following/"+strconv.Itoa(author)) }()
	<-s.reached
	m.expect(t, m.call(t, reader, http.MethodPut, "/v1/following/"+strconv.Itoa(author)), http.StatusNoContent)
	m.deliver(t)
	close(s.release)
	m.expect(t, <-done, http.StatusNoContent)
	m.deliver(t)
	posts = append(posts, m.post(t, author))
	m.deliver(t)
	slices.Reverse(posts)
	if got := m.readFrom(t, reader, 20, "", 0); !slices.Equal(got, posts) {
		t.Fatalf("the reader follows the author, and the feed holds %v, want %v", got, posts)
	}
}

// TestOwnPostStalledAfterCommit: a post stalls between its commit and its
// push into its author's feed. Meanwhile a read from PostgreSQL (another
// change of the author's in flight sends it there) shows the post; every
// later read must show it too, though Redis does not have it yet.
func TestOwnPostStalledAfterCommit(t *testing.T) {
	t.Parallel()
	rdb, prefix, cluster := testenv.NewUniversalRedis(t)
	m := startPipeline(t, testenv.NewPool(t), rdb, cluster, prefix, modelConfig{
		MaxLen: 40, Backfill: 50, ChunkSize: 1000, PageSize: 1000,
	})
	const author = 1
	first := m.post(t, author)
	m.deliver(t)
	if got := m.readFrom(t, author, 20, "", 0); !slices.Equal(got, []int64{first}) {
		t.Fatalf("the author's feed: %v, want [%d]", got, first)
	}

	s := newStall()
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- m.callIn(s.ctx(), t, author, http.MethodPost, "/v1/posts", `{"body":"stalled"}`) }()
	<-s.reached
	unmark, err := m.feeds.MarkGraphChange(context.Background(), author) // as a mute in flight would
	if err != nil {
		t.Fatal(err)
	}
	shown := m.readFrom(t, author, 20, "", 0)
	if len(shown) != 2 {
		t.Fatalf("read from PostgreSQL: %v, want the committed post too", shown)
	}
	unmark()
	if got := m.readFrom(t, author, 20, "", 0); !slices.Equal(got, shown) {
		t.Fatalf("a later read shows %v after %v", got, shown)
	}
	close(s.release)
	m.expect(t, <-done, http.StatusCreated)
	if got := m.readFrom(t, author, 20, "", 0); !slices.Equal(got, shown) {
		t.Fatalf("after the post answered: %v, want %v", got, shown)
	}
}
