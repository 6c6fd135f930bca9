// Package api is the HTTP API of newsfeed (echo): posts, follows, listings and
// the home feed, with bearer-token authentication, strict input validation,
// per-user rate limits and one error shape. See docs/openapi.yaml.
package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/docs"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/logctx"
	"github.com/newsfeed/newsfeed/internal/routing"
)

// Posts is the posts side of the store.
type Posts interface {
	CreatePost(ctx context.Context, authorID int64, body, key string) (domain.Post, bool, error)
	// CreateRepost reposts a post, or a repost's original; created is
	// false when the user had reposted the original already.
	CreateRepost(ctx context.Context, userID, postID int64) (domain.Post, bool, error)
	Post(ctx context.Context, id int64) (domain.Post, error)
	// DeletePostAndReposts deletes a post and its reposts, and returns
	// the reposts' ids.
	DeletePostAndReposts(ctx context.Context, id, authorID int64) ([]int64, error)
	AuthorPosts(ctx context.Context, authorID, before int64, limit int) ([]domain.Post, error)
}

// Graph is the follows side of the store.
type Graph interface {
	// Follow and Unfollow change an edge and return the state it is in
	// after, with the version of the follower's graph they took.
	Follow(ctx context.Context, follower, followee int64) (domain.EdgeChange, error)
	Unfollow(ctx context.Context, follower, followee int64) (domain.EdgeChange, error)
	Followers(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	Following(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	// Mute, Unmute, Block and Unblock change a relation and return the
	// hide states it left (and the follows a block removed), with the
	// versions they took.
	Mute(ctx context.Context, user, other int64) (domain.RelationChange, error)
	Unmute(ctx context.Context, user, other int64) (domain.RelationChange, error)
	Block(ctx context.Context, user, other int64) (domain.RelationChange, error)
	Unblock(ctx context.Context, user, other int64) (domain.RelationChange, error)
	Mutes(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	Blocks(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	// Blocked reports whether a block stands between a and b, either way.
	Blocked(ctx context.Context, a, b int64) (bool, error)
}

// Feeds reads home feeds and keeps them right after follows and deletes.
type Feeds interface {
	Read(ctx context.Context, userID, before int64, limit int) (domain.FeedPage, error)
	// ApplyFollow applies a follow state to the follower's feed unless a
	// newer one is there (applied is false then).
	ApplyFollow(ctx context.Context, st domain.EdgeState) (added int, applied bool, err error)
	// ApplyHide applies a hide state (a mute, a block) to the reader's
	// feed unless a newer one is there.
	ApplyHide(ctx context.Context, st domain.HideState) (applied bool, err error)
	// Hides returns the users whose entries reader's feed hides; known is
	// false when Redis does not hold the feed.
	Hides(ctx context.Context, reader int64) (hides []int64, known bool, err error)
	// PushOwn puts a new post or repost into its author's own feed.
	PushOwn(ctx context.Context, e domain.Entry) error
	// MarkGraphChange marks a change of userID's graph in flight, from
	// before its commit until unmark is called after its application, so
	// that reads do not show it half applied.
	MarkGraphChange(ctx context.Context, userID int64) (unmark func(), err error)
	// MarkDeleting marks the delete of a post in flight, from before its
	// commit until ForgetPost (or undo, if it did not commit).
	MarkDeleting(ctx context.Context, postID int64) (undo func(), err error)
	Drop(ctx context.Context, userID int64) error
	ForgetPost(ctx context.Context, postID int64) error
}

// FollowChanges is told of a follow or an unfollow once the feed has it.
type FollowChanges interface {
	Followed(ctx context.Context, follower, followee int64)
	Unfollowed(ctx context.Context, follower, followee int64)
	// Hid: what the feeds of readers hide changed.
	Hid(ctx context.Context, readers []int64)
}

// Outages is what the process knows of its dependencies' outages
// (health.Watch), which it logs once each, when they begin and end.
type Outages interface {
	// Explained reports whether err is explained by a dependency outage
	// that is already logged.
	Explained(ctx context.Context, err error) bool
	// IsDown reports whether the dependency called name (health.Redis) is
	// known to be down; the watch pings it meanwhile and learns of its
	// return without any request trying it.
	IsDown(name string) bool
}

// streamRoute is the live stream's route: a response that lasts.
const streamRoute = "/v1/feed/stream"

// The operations routes, served beside the API when Config.Ops is set.
const (
	opsMetrics = "/metrics"
	opsHealth  = "/healthz"
	opsReady   = "/readyz"
)

// instrumentationName names the API's tracer.
const instrumentationName = "github.com/newsfeed/newsfeed/api"

// Server holds the handlers.
type Server struct {
	posts    Posts
	graph    Graph
	feeds    Feeds
	fallback *feedFallback
	replica  Listings     // the listings of posts and graph: the replica's, with database.read_url
	sticky   *stickyReads // nil without Config.ReadYourWrites
	cfg      Config
	log      *zap.Logger
	tracer   trace.Tracer
	tracing  bool // cfg.TracerProvider was set
}

// New builds the echo instance serving the API. It returns an error, naming
// the field, when cfg holds a value out of range.
func New(posts Posts, graph Graph, feeds Feeds, cfg Config) (*echo.Echo, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{posts: posts, graph: graph, feeds: feeds, cfg: cfg, log: cfg.Logger}
	s.tracing = cfg.TracerProvider != nil
	if !s.tracing {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	s.tracer = cfg.TracerProvider.Tracer(instrumentationName)
	s.replica = listings{posts, graph}
	if cfg.ReadYourWrites != nil {
		s.sticky = newStickyReads(cfg.ReadYourWrites, s.replica, cfg.Registerer, cfg.Outages, cfg.Logger)
	}
	if cfg.Truth != nil {
		s.fallback = newFeedFallback(cfg.Truth, cfg.FallbackConcurrency, cfg.Registerer)
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(cfg.Outages)
	e.Use(s.observe, requestMetrics(cfg.Registerer), recoverPanics, limitBody, requestDeadline(cfg.RequestTimeout, streamRoute))
	if cfg.Ops != nil {
		ops := echo.WrapHandler(cfg.Ops)
		e.GET(opsMetrics, ops)
		e.GET(opsHealth, ops)
		e.GET(opsReady, ops)
	}
	// The API's own description, open like /healthz: the file its tests
	// hold every answer to.
	e.GET("/openapi.yaml", serveOpenAPI)

	// Authentication is per route, not on the group: a group middleware makes
	// echo add catch-all routes that would answer 404 for a wrong method.
	// The query string is checked after authentication, like all input.
	auth := authenticate(cfg.Secret)
	limits := newRateLimits(cfg.RateLimiter, cfg.PostsPerMinute, cfg.FollowsPerMinute, cfg.Registerer, cfg.Outages)
	limitPosts, limitFollows := limits.limit(actionPost), limits.limit(actionFollow)
	e.POST("/v1/posts", s.createPost, auth, strictQuery, limitPosts)
	e.GET("/v1/posts/:id", s.getPost, auth, strictQuery)
	e.DELETE("/v1/posts/:id", s.deletePost, auth, strictQuery)
	e.PUT("/v1/following/:user_id", s.follow, auth, strictQuery, limitFollows)
	e.DELETE("/v1/following/:user_id", s.unfollow, auth, strictQuery, limitFollows)
	e.GET("/v1/users/:id/followers", s.followers, auth, strictQuery)
	e.GET("/v1/users/:id/following", s.following, auth, strictQuery)
	e.GET("/v1/users/:id/posts", s.userPosts, auth, strictQuery)
	e.GET("/v1/feed", s.homeFeed, auth, strictQuery)
	e.POST("/v1/posts/:id/reposts", s.createRepost, auth, strictQuery, limitPosts)
	e.PUT("/v1/mutes/:user_id", s.mute, auth, strictQuery)
	e.DELETE("/v1/mutes/:user_id", s.unmute, auth, strictQuery)
	e.GET("/v1/mutes", s.mutes, auth, strictQuery)
	e.PUT("/v1/blocks/:user_id", s.block, auth, strictQuery)
	e.DELETE("/v1/blocks/:user_id", s.unblock, auth, strictQuery)
	e.GET("/v1/blocks", s.blocks, auth, strictQuery)
	e.GET(streamRoute, s.feedStream, streamAuth(cfg.Secret), strictQuery)
	s.mountApp(e)
	routing.NoDeeperPaths(e)
	return e, nil
}

// serveOpenAPI answers docs/openapi.yaml, as YAML (RFC 9512).
func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", docs.OpenAPI)
}

// listings reads the listings from where posts and graph read them.
type listings struct {
	Posts
	Graph
}

// page is the JSON shape of every listing.
type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

type createPostRequest struct {
	Body *string `json:"body"`
}

func (s *Server) createPost(c echo.Context) error {
	key := c.Request().Header.Get("Idempotency-Key")
	switch {
	case utf8.RuneCountInString(key) > 255:
		return invalidArgument("Idempotency-Key is longer than 255 characters")
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return invalidArgument("Idempotency-Key must be UTF-8 text without NUL")
	}
	var req createPostRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	body, err := s.validBody(req.Body)
	if err != nil {
		return err
	}
	unmark := s.markOwnPost(c)
	post, created, err := s.createInTransaction(c.Request().Context(), userID(c), body, key)
	if err != nil {
		unmark()
		return err
	}
	s.wrote(c) // a repeat too: the first request may have died before it recorded
	if !created {
		unmark()
		return c.JSON(http.StatusOK, post)
	}
	s.cfg.OutboxWrittenFunc()
	failpoint.Hit(c.Request().Context(), failpoint.AfterCommit)
	s.pushOwn(c, post, unmark)
	c.Response().Header().Set("Location", "/v1/posts/"+strconv.FormatInt(post.ID, 10))
	return c.JSON(http.StatusCreated, post)
}

// markOwnPost marks the caller's feed changing before a post or repost of
// theirs commits, as a graph change is (MarkGraphChange): from the commit
// until pushOwn puts it into their feed, PostgreSQL has it and Redis not,
// and a read from each in turn (a read goes to PostgreSQL while any change
// of the reader's is in flight) would show it, then not. While the mark
// stands their reads come from PostgreSQL. Call unmark once pushed, or
// when nothing was written. A mark that fails is logged at debug: reads
// from Redis then lack the post until it is pushed, as they lack any post
// on its way.
func (s *Server) markOwnPost(c echo.Context) (unmark func()) {
	if redisKnownDown(s.cfg.Outages) {
		return func() {}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), ownPushBudget)
	defer cancel()
	unmark, err := s.feeds.MarkGraphChange(ctx, userID(c))
	if err != nil {
		logctx.From(ctx, s.log).Debug("cannot mark the post in flight", zap.Error(err))
	}
	return unmark
}

// pushOwn puts a new post or repost into its author's own feed before the
// 201: they read it from then on; then it takes markOwnPost's mark away.
// If Redis cannot take it, the mark stays until it expires and reads come
// from PostgreSQL, which has the post, and the fan-out pushes it when
// Redis is back.
//
// It has ownPushBudget, far less than a request's deadline: a post must
// not wait on a Redis that stopped answering (reads fall back to
// PostgreSQL then), and with Redis known down it is not tried at all.
func (s *Server) pushOwn(c echo.Context, post domain.Post, unmark func()) {
	if redisKnownDown(s.cfg.Outages) {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), ownPushBudget)
	defer cancel()
	if err := s.feeds.PushOwn(ctx, domain.Entry{PostID: post.ID, AuthorID: post.AuthorID}); err != nil {
		s.degraded(c, "cannot put the post into its author's feed yet; its fan-out will", err, zap.Int64("post_id", post.ID))
		return
	}
	unmark()
}

// ownPushBudget bounds markOwnPost and pushOwn: a mark, a push, and the
// drop of the feed should it fail, take a few milliseconds when Redis
// answers.
const ownPushBudget = 250 * time.Millisecond

// createInTransaction creates the post in its span, the parent of the
// post's delivery: the outbox row keeps its trace context.
func (s *Server) createInTransaction(ctx context.Context, author int64, body, key string) (domain.Post, bool, error) {
	ctx, span := s.tracer.Start(ctx, "create post", trace.WithAttributes(semconv.DBSystemNamePostgreSQL))
	defer span.End()
	post, created, err := s.posts.CreatePost(ctx, author, body, key)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return post, created, err
	}
	span.SetAttributes(attribute.Int64("newsfeed.post_id", post.ID), attribute.Bool("newsfeed.created", created))
	return post, created, nil
}

func (s *Server) getPost(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	post, err := s.posts.Post(ctx, id)
	if err != nil {
		return err
	}
	if err := s.notBlocked(ctx, userID(c), post); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, post)
}

func (s *Server) deletePost(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	// A post that is not there, or not the caller's, is refused before
	// anything is written (DeletePost checks again, in its transaction).
	post, err := s.posts.Post(ctx, id)
	if err != nil {
		return err
	}
	if post.AuthorID != me {
		return domain.ErrForbidden
	}
	// From the commit until the post's tombstone is cached, reads ask
	// PostgreSQL for it: no read shows it gone and a later one back.
	undo, err := s.feeds.MarkDeleting(ctx, id)
	if err != nil {
		logctx.From(ctx, s.log).Debug("cannot mark the delete in flight", zap.Error(err))
	}
	reposts, err := s.posts.DeletePostAndReposts(ctx, id, me)
	if err != nil {
		undo()
		return err
	}
	s.wrote(c)
	s.cfg.OutboxWrittenFunc()
	failpoint.Hit(ctx, failpoint.AfterCommit)
	// Hide it, and its reposts, which went with it, from reads now; each
	// post.deleted event also removes its post from every feed, and
	// repeats this if it fails here (the mark expires meanwhile, and
	// reads ask PostgreSQL until then).
	for _, gone := range append([]int64{id}, reposts...) {
		if err := s.feeds.ForgetPost(ctx, gone); err != nil {
			s.degraded(c, "cannot hide deleted post yet; its event will", err, zap.Int64("post_id", gone))
		}
	}
	return c.NoContent(http.StatusNoContent)
}

// follow and unfollow commit the change in PostgreSQL, then apply to Redis
// the state PostgreSQL has, with the version the change took — never the
// request's intent: a request that stalls between the two steps while a
// newer change of the same follow is applied finds its state stale, and
// changes nothing. (Both also apply when nothing changed, so that a retry
// repairs what a failed application left.) The follow.created and
// follow.deleted events apply the state again, should this fail. The
// change is marked in flight from before its commit to its application
// (MarkGraphChange), and reads meanwhile come from PostgreSQL.
func (s *Server) follow(c echo.Context) error {
	return s.changeFollow(c, true)
}

func (s *Server) unfollow(c echo.Context) error {
	return s.changeFollow(c, false)
}

func (s *Server) changeFollow(c echo.Context, follow bool) error {
	followee, err := pathID(c, "user_id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	change := s.graph.Unfollow
	switch {
	case follow && followee == me:
		return domain.ErrSelfFollow // before anything is written
	case followee == me:
		// Nobody follows themself, and everyone's feed holds their own
		// posts: there is nothing to undo, and nothing is written.
		return c.NoContent(http.StatusNoContent)
	case follow:
		change = s.graph.Follow
	}
	unmark, err := s.feeds.MarkGraphChange(ctx, me)
	if err != nil {
		logctx.From(ctx, s.log).Debug("cannot mark the graph change in flight", zap.Error(err))
	}
	ch, err := change(ctx, me, followee)
	if errors.Is(err, domain.ErrBlocked) {
		unmark()
		return newError(http.StatusForbidden, "forbidden", "you cannot follow this user: a block stands between you")
	}
	if err != nil {
		unmark()
		return err
	}
	s.wrote(c) // also when nothing changed: its own request may not have recorded
	if ch.Changed {
		s.cfg.OutboxWrittenFunc()
	}
	failpoint.Hit(ctx, failpoint.AfterCommit)
	// A follow shows the followee's recent posts from the next read on; an
	// unfollow takes them out before this answers.
	_, applied, err := s.feeds.ApplyFollow(ctx, ch.EdgeState)
	if err != nil && !ch.Following {
		// Drop the feed: the next read rebuilds it from PostgreSQL. If that
		// fails too, Redis is down: the unfollow stands on PostgreSQL alone
		// (a 503 now would say it failed), reads fall back to PostgreSQL,
		// and the follow.deleted event cleans the feed once Redis answers.
		if err = s.feeds.Drop(ctx, me); err == nil {
			applied = true // the next read rebuilds it without the followee
		}
	}
	if err != nil {
		// The mark stays until it expires: reads come from PostgreSQL
		// meanwhile, and the change's event applies it.
		s.degraded(c, "cannot apply the follow change to the feed yet; its event will", err, zap.Int64("followee_id", followee))
		return c.NoContent(http.StatusNoContent)
	}
	unmark()
	if applied && s.cfg.Changes != nil {
		if ch.Following {
			s.cfg.Changes.Followed(ctx, me, followee)
		} else {
			s.cfg.Changes.Unfollowed(ctx, me, followee)
		}
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) followers(c echo.Context) error { return s.listFollows(c, Listings.Followers) }
func (s *Server) following(c echo.Context) error { return s.listFollows(c, Listings.Following) }

type listFollowsFunc func(l Listings, ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)

func (s *Server) listFollows(c echo.Context, list listFollowsFunc) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	return s.listFollowsOf(c, id, list)
}

// listFollowsOf answers a page of id's edges that list reads.
func (s *Server) listFollowsOf(c echo.Context, id int64, list listFollowsFunc) error {
	limit, err := queryLimit(c)
	if err != nil {
		return err
	}
	after, err := decodeFollowCursor(c.QueryParam("cursor"))
	if err != nil {
		return err
	}
	follows, err := list(s.reads(c), c.Request().Context(), id, after, limit+1)
	if err != nil {
		return err
	}
	out := page[domain.Follow]{Items: follows}
	if len(follows) > limit {
		out.Items = follows[:limit]
		last := follows[limit-1]
		out.NextCursor = encodeFollowCursor(domain.FollowCursor{Since: last.Since, UserID: last.UserID})
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) userPosts(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	limit, before, err := postPaging(c)
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	if id != me {
		if blocked, err := s.graph.Blocked(ctx, me, id); err != nil {
			return err
		} else if blocked {
			return errUserNotThere
		}
	}
	posts, err := s.reads(c).AuthorPosts(ctx, id, before, limit+1)
	if err != nil {
		return err
	}
	// Reposts of posts whose author and the caller block each other are
	// not shown either (the page may come out shorter; its cursor holds).
	next := int64(0)
	if len(posts) > limit {
		next = posts[limit-1].ID
		posts = posts[:limit]
	}
	if posts, err = s.withoutBlocked(ctx, me, posts); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, postPage(domain.FeedPage{Posts: posts, Next: next}, limit))
}

func (s *Server) homeFeed(c echo.Context) error {
	limit, before, err := postPaging(c)
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	if s.fallback != nil && redisKnownDown(s.cfg.Outages) {
		// Trying Redis first would cost every read a dial and its
		// retries (seconds against a refused port). The watch pings Redis
		// meanwhile; once it answers, reads go back to it.
		p, err := s.fallback.read(ctx, me, before, limit, errRedisKnownDown)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, postPage(p, limit))
	}
	p, err := s.feeds.Read(ctx, me, before, limit)
	if err == nil {
		return c.JSON(http.StatusOK, postPage(p, limit))
	}
	if s.fallback == nil || ctx.Err() != nil {
		return err
	}
	cause := err
	if p, err = s.fallback.read(ctx, me, before, limit, cause); err != nil {
		return err
	}
	if err := c.JSON(http.StatusOK, postPage(p, limit)); err != nil {
		return err
	}
	// The page goes out first: telling whether an outage explains the
	// failure may take a round of pings (which, finding Redis down, sends
	// the next reads straight to PostgreSQL).
	_ = http.NewResponseController(c.Response().Writer).Flush()
	s.degraded(c, "home feed read from PostgreSQL: Redis did not serve it", cause)
	return nil
}

// redisKnownDown reports whether outages (which may be nil) knows Redis to
// be down.
func redisKnownDown(outages Outages) bool {
	return outages != nil && outages.IsDown(health.Redis)
}

// postPage shapes posts as a page; with more than limit posts (a listing that
// asked for one extra) or a Next from the feed, it has a next cursor.
func postPage(p domain.FeedPage, limit int) page[domain.Post] {
	out := page[domain.Post]{Items: p.Posts}
	if out.Items == nil {
		out.Items = []domain.Post{}
	}
	next := p.Next
	if len(p.Posts) > limit {
		out.Items = p.Posts[:limit]
		next = p.Posts[limit-1].ID
	}
	if next > 0 {
		out.NextCursor = encodePostCursor(next)
	}
	return out
}

func postPaging(c echo.Context) (limit int, before int64, err error) {
	if limit, err = queryLimit(c); err != nil {
		return 0, 0, err
	}
	if before, err = decodePostCursor(c.QueryParam("cursor")); err != nil {
		return 0, 0, err
	}
	return limit, before, nil
}
