package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// Reposts, mutes and blocks (docs/API.md, "What a home feed holds").

// errUserNotThere is what a user's posts are to someone a block stands
// between them and: as if they did not exist.
var errUserNotThere = newError(http.StatusNotFound, "not_found", "no such user")

func (s *Server) createRepost(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	// Reposting a repost reposts its original. A post hidden from the
	// caller — its author, or its original's, muted by them or behind a
	// block either way — is not there to repost (docs/API.md). The store
	// decides both in the statement that writes: a delete, a mute or a
	// block meanwhile is seen.
	unmark := s.markOwnPost(c)
	repost, created, err := s.posts.CreateRepost(ctx, me, id)
	if err != nil {
		unmark()
		return err
	}
	s.wrote(c)
	if !created {
		unmark()
		return c.JSON(http.StatusOK, repost)
	}
	s.cfg.OutboxWrittenFunc()
	s.pushOwn(c, repost, unmark)
	c.Response().Header().Set("Location", "/v1/posts/"+strconv.FormatInt(repost.ID, 10))
	return c.JSON(http.StatusCreated, repost)
}

// notBlocked answers domain.ErrNotFound when a block stands between viewer
// and the post's author, or its original's: each one's posts and reposts
// are not there for the other.
func (s *Server) notBlocked(ctx context.Context, viewer int64, p domain.Post) error {
	for _, author := range []int64{p.AuthorID, originalAuthor(p)} {
		if author == 0 || author == viewer {
			continue
		}
		blocked, err := s.graph.Blocked(ctx, viewer, author)
		if err != nil {
			return err
		}
		if blocked {
			return domain.ErrNotFound
		}
	}
	return nil
}

// withoutBlocked drops from posts the reposts whose original's author and
// viewer block each other.
func (s *Server) withoutBlocked(ctx context.Context, viewer int64, posts []domain.Post) ([]domain.Post, error) {
	out := posts[:0]
	for _, p := range posts {
		if a := originalAuthor(p); a != 0 && a != viewer {
			blocked, err := s.graph.Blocked(ctx, viewer, a)
			if err != nil {
				return nil, err
			}
			if blocked {
				continue
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func originalAuthor(p domain.Post) int64 {
	if p.RepostOf != nil {
		return p.RepostOf.AuthorID
	}
	return 0
}

// mute, unmute, block and unblock commit the change in PostgreSQL, then
// apply to Redis what PostgreSQL says each feed it concerns hides now, with
// the versions the change took — as follows do (changeFollow): a request
// that stalls between the two steps finds its states stale. A block also
// removed the follows between the two, both ways, whose unfollows apply
// the same way. The relation.changed and follow.deleted events apply the
// states again, should this fail.
func (s *Server) mute(c echo.Context) error    { return s.changeRelation(c, s.graph.Mute, false) }
func (s *Server) unmute(c echo.Context) error  { return s.changeRelation(c, s.graph.Unmute, false) }
func (s *Server) block(c echo.Context) error   { return s.changeRelation(c, s.graph.Block, true) }
func (s *Server) unblock(c echo.Context) error { return s.changeRelation(c, s.graph.Unblock, true) }

type relationFunc func(ctx context.Context, user, other int64) (domain.RelationChange, error)

func (s *Server) changeRelation(c echo.Context, change relationFunc, both bool) error {
	other, err := pathID(c, "user_id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	if other == me {
		return domain.ErrSelfRelation // before anything is written
	}
	readers := []int64{me}
	if both {
		readers = append(readers, other)
	}
	// Reads of either feed come from PostgreSQL from before the commit
	// until the change is applied (see changeFollow). Without Redis there
	// is no mark, and the change is refused (503, nothing written; unlike
	// follows, API.md does not take mutes and blocks on PostgreSQL alone):
	// accepted, it would hide only until Redis is back, whose feeds, their
	// hides and follows from before the change, would show what it hides
	// — a blocked user the blocker's posts — until its events ran.
	if redisKnownDown(s.cfg.Outages) {
		return errRedisKnownDown
	}
	var unmarks []func()
	unmarkAll := func() {
		for _, u := range unmarks {
			u()
		}
	}
	for _, r := range readers {
		unmark, err := s.feeds.MarkGraphChange(ctx, r)
		if err != nil {
			unmarkAll()
			return err
		}
		unmarks = append(unmarks, unmark)
	}
	ch, err := change(ctx, me, other)
	if err != nil {
		unmarkAll()
		return err
	}
	s.wrote(c)
	if ch.Changed {
		s.cfg.OutboxWrittenFunc()
	}
	failpoint.Hit(ctx, failpoint.AfterCommit)
	failed := false
	apply := func(reader int64, err error) {
		if err == nil {
			return
		}
		// The next read rebuilds the feed from PostgreSQL; if Redis cannot
		// even drop it, the marks stay until they expire (reads come from
		// PostgreSQL meanwhile) and the events apply the change.
		if s.feeds.Drop(ctx, reader) != nil {
			failed = true
			s.degraded(c, "cannot apply the relation change to the feed yet; its event will", err,
				zap.Int64("reader", reader))
		}
	}
	for _, e := range ch.Unfollow {
		_, _, err := s.feeds.ApplyFollow(ctx, e.EdgeState)
		apply(e.Follower, err)
	}
	for _, st := range ch.Hides {
		_, err := s.feeds.ApplyHide(ctx, st)
		apply(st.Reader, err)
	}
	if failed {
		return c.NoContent(http.StatusNoContent)
	}
	unmarkAll()
	if s.cfg.Changes != nil {
		for _, e := range ch.Unfollow {
			s.cfg.Changes.Unfollowed(ctx, e.Follower, e.Followee)
		}
		s.cfg.Changes.Hid(ctx, readers)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) mutes(c echo.Context) error  { return s.listRelations(c, s.graph.Mutes) }
func (s *Server) blocks(c echo.Context) error { return s.listRelations(c, s.graph.Blocks) }

// listRelations lists the caller's own mutes or blocks (nobody else's),
// from the primary: the caller sees their change at once.
func (s *Server) listRelations(c echo.Context, list func(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)) error {
	return s.listFollowsOf(c, userID(c), func(_ Listings, ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
		return list(ctx, userID, after, limit)
	})
}
