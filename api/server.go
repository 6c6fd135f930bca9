// Package api is the HTTP API of newsfeed (echo): posts, follows, listings and
// the home feed, with bearer-token authentication, strict input validation,
// per-user rate limits and one error shape. See docs/openapi.yaml.
package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
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
	"github.com/newsfeed/newsfeed/internal/routing"
)

// Posts is the posts side of the store.
type Posts interface {
	CreatePost(ctx context.Context, authorID int64, body, key string) (domain.Post, bool, error)
	Post(ctx context.Context, id int64) (domain.Post, error)
	DeletePost(ctx context.Context, id, authorID int64) error
	AuthorPosts(ctx context.Context, authorID, before int64, limit int) ([]domain.Post, error)
}

// Graph is the follows side of the store.
type Graph interface {
	Follow(ctx context.Context, follower, followee int64) (bool, error)
	Unfollow(ctx context.Context, follower, followee int64) (bool, error)
	Followers(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	Following(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
}

// Feeds reads home feeds and keeps them right after follows and deletes.
type Feeds interface {
	Read(ctx context.Context, userID, before int64, limit int) (domain.FeedPage, error)
	Followed(ctx context.Context, follower, followee int64) (int, error)
	Unfollowed(ctx context.Context, follower, followee int64) error
	Drop(ctx context.Context, userID int64) error
	ForgetPost(ctx context.Context, postID int64) error
}

// FollowChanges is told of a follow or an unfollow once the feed has it.
type FollowChanges interface {
	Followed(ctx context.Context, follower, followee int64)
	Unfollowed(ctx context.Context, follower, followee int64)
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
	post, created, err := s.createInTransaction(c.Request().Context(), userID(c), body, key)
	if err != nil {
		return err
	}
	s.wrote(c) // a repeat too: the first request may have died before it recorded
	if !created {
		return c.JSON(http.StatusOK, post)
	}
	s.cfg.OutboxWrittenFunc()
	c.Response().Header().Set("Location", "/v1/posts/"+strconv.FormatInt(post.ID, 10))
	return c.JSON(http.StatusCreated, post)
}

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
	post, err := s.posts.Post(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, post)
}

func (s *Server) deletePost(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := s.posts.DeletePost(ctx, id, userID(c)); err != nil {
		return err
	}
	s.wrote(c)
	s.cfg.OutboxWrittenFunc()
	failpoint.Hit(ctx, failpoint.AfterCommit)
	// Hide it from reads now; the post.deleted event also removes it from
	// every feed, and repeats this if it fails here.
	if err := s.feeds.ForgetPost(ctx, id); err != nil {
		s.degraded(c, "cannot hide deleted post yet; its event will", err, zap.Int64("post_id", id))
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) follow(c echo.Context) error {
	followee, err := pathID(c, "user_id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	created, err := s.graph.Follow(ctx, me, followee)
	if err != nil {
		return err
	}
	s.wrote(c) // also when the edge was there: its own request may not have recorded
	failpoint.Hit(ctx, failpoint.AfterCommit)
	if created {
		s.cfg.OutboxWrittenFunc()
		// Show the followee's recent posts from the next read on; the
		// follow.created event does the same if this fails.
		if _, err := s.feeds.Followed(ctx, me, followee); err != nil {
			s.degraded(c, "cannot backfill feed yet; its event will", err, zap.Int64("followee_id", followee))
		} else if s.cfg.Changes != nil {
			s.cfg.Changes.Followed(ctx, me, followee)
		}
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) unfollow(c echo.Context) error {
	followee, err := pathID(c, "user_id")
	if err != nil {
		return err
	}
	ctx, me := c.Request().Context(), userID(c)
	removed, err := s.graph.Unfollow(ctx, me, followee)
	if err != nil {
		return err
	}
	s.wrote(c)
	if removed {
		s.cfg.OutboxWrittenFunc()
	}
	failpoint.Hit(ctx, failpoint.AfterCommit)
	// The followee's posts leave the feed before this answers — also when
	// the edge was gone already, so that a retry after a failed clean-up
	// cleans. If it fails, drop the feed: the next read rebuilds it from
	// PostgreSQL. If that fails too, Redis is down: the unfollow stands on
	// PostgreSQL alone (a 503 now would say it failed), reads fall back to
	// PostgreSQL, and the follow.deleted event cleans the feed once Redis
	// answers.
	if err := s.feeds.Unfollowed(ctx, me, followee); err != nil {
		if derr := s.feeds.Drop(ctx, me); derr != nil {
			s.degraded(c, "cannot clean the feed after an unfollow while Redis is down; its event will",
				derr, zap.Int64("followee_id", followee))
			return c.NoContent(http.StatusNoContent)
		}
	}
	if s.cfg.Changes != nil {
		s.cfg.Changes.Unfollowed(ctx, me, followee)
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
	posts, err := s.reads(c).AuthorPosts(c.Request().Context(), id, before, limit+1)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, postPage(domain.FeedPage{Posts: posts}, limit))
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
