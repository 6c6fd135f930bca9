package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// RateLimiter counts one user's events of an action, shared by every serve
// process (ratelimit.Limiter, in Redis).
type RateLimiter interface {
	// Allow counts one event of action by user against perMinute a minute
	// and returns 0 when it may happen, otherwise how long until the next
	// one would be allowed.
	Allow(ctx context.Context, action string, user int64, perMinute int) (wait time.Duration, err error)
}

// The actions that are limited, as they appear in keys and metrics.
const (
	actionPost   = "posts"
	actionFollow = "follows" // follows and unfollows together
)

// rateLimitWait bounds the limiter's round trip: a Redis that is slow or
// gone must not hold a write that PostgreSQL alone can accept.
const rateLimitWait = 250 * time.Millisecond

// rateLimits enforces ratelimit.posts_per_minute and follows_per_minute. It
// fails open: when the limiter does not answer, or Redis is known to be
// down (then it is not asked), the request goes through, counted in
// newsfeed_ratelimit_fail_open_total. The outage is logged by the health
// watch; each request let through logs at debug (at warn when no outage
// explains it), with its request id.
type rateLimits struct {
	limiter  RateLimiter
	perMin   map[string]int
	rejected *prometheus.CounterVec
	failOpen *prometheus.CounterVec
	outages  Outages
}

func newRateLimits(limiter RateLimiter, postsPerMinute, followsPerMinute int, reg prometheus.Registerer, outages Outages) *rateLimits {
	rl := &rateLimits{
		limiter: limiter,
		perMin:  map[string]int{actionPost: postsPerMinute, actionFollow: followsPerMinute},
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_ratelimit_rejected_total",
			Help: "Requests refused with 429 because their user was over a rate limit, by action.",
		}, []string{"action"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_ratelimit_fail_open_total",
			Help: "Requests let through unlimited because the rate limiter (Redis) did not answer, by action.",
		}, []string{"action"}),
		outages: outages,
	}
	if reg != nil {
		reg.MustRegister(rl.rejected, rl.failOpen)
	}
	return rl
}

// limit is the middleware of one action's routes; it runs after
// authentication, so it knows the user.
func (rl *rateLimits) limit(action string) echo.MiddlewareFunc {
	perMinute := rl.perMin[action]
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if rl.limiter == nil || perMinute <= 0 {
			return next
		}
		return func(c echo.Context) error {
			ctx := c.Request().Context()
			if redisKnownDown(rl.outages) {
				// Asking would cost the write rateLimitWait for an
				// answer that cannot come.
				rl.failOpen.WithLabelValues(action).Inc()
				return next(c)
			}
			lctx, cancel := context.WithTimeout(ctx, rateLimitWait)
			wait, err := rl.limiter.Allow(lctx, action, userID(c), perMinute)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err() // the client left: no outage
			case err != nil:
				rl.failOpen.WithLabelValues(action).Inc()
				logAside(ctx, rl.outages, requestLog(c), "rate limiter did not answer; request let through", err,
					zap.String("action", action))
				return next(c)
			}
			if wait > 0 {
				rl.rejected.WithLabelValues(action).Inc()
				secs := retryAfterSeconds(wait)
				c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
				return newError(http.StatusTooManyRequests, "rate_limited",
					"too many "+action+": at most "+strconv.Itoa(perMinute)+" a minute; retry in "+strconv.Itoa(secs)+"s")
			}
			return next(c)
		}
	}
}

// retryAfterSeconds is d in whole seconds, rounded up and at least 1: the
// value of a Retry-After header that never invites a retry too early.
func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
