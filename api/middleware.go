package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// recoverPanics turns a panic into a logged 500 with the standard body: a
// bug, the one line that carries a stack.
func recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				requestLog(c).Error("panic serving request", zap.String("panic", fmt.Sprint(r)),
					zap.ByteString("stack", debug.Stack()))
				err = errInternal
			}
		}()
		return next(c)
	}
}

// What of http.request_timeout is kept for after the request's deadline: a
// tenth, and at least minAnswerReserve — writing the 503, and what a request
// releases on its way out whatever its context says (a failed feed
// rebuild's lock: a Redis call of its own, two tries of a few hundred
// milliseconds against a silent Redis). The request's calls to PostgreSQL
// and Redis get the rest.
const (
	answerShare      = 10
	minAnswerReserve = 750 * time.Millisecond
)

// callBudget is how long a request's dependency calls may take, together.
func callBudget(requestTimeout time.Duration) time.Duration {
	return requestTimeout - max(requestTimeout/answerShare, minAnswerReserve)
}

// requestDeadline gives every request's context a deadline: what a handler
// asks of PostgreSQL and Redis ends with it (pgx closes a connection whose
// context ends; go-redis, with ContextTimeoutEnabled, takes the deadline to
// the socket), and the error answers 503. The live stream, a response that
// lasts, is excepted: it bounds its own opening (feedStream).
func requestDeadline(requestTimeout time.Duration, except string) echo.MiddlewareFunc {
	budget := callBudget(requestTimeout)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Path() == except {
				return next(c)
			}
			ctx, cancel := context.WithTimeout(c.Request().Context(), budget)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

// requestMetrics observes every request in newsfeed_http_request_duration_seconds.
func requestMetrics(reg prometheus.Registerer) echo.MiddlewareFunc {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "newsfeed_http_request_duration_seconds",
		Help:    "HTTP requests by method, route and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"method", "route", "code"})
	if reg != nil {
		reg.MustRegister(hist)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err) // write the error now, so its status is the one observed
			}
			hist.WithLabelValues(c.Request().Method, routeOf(c), strconv.Itoa(c.Response().Status)).
				Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

// limitBody refuses any request whose body is over MaxBodyBytes on every
// route, whether or not its handler reads a body: by its Content-Length up
// front, and a body sent without one (chunked) is read here, bounded, so
// that routes that read no body refuse an oversized one too.
func limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > MaxBodyBytes {
			return errTooLarge
		}
		if r.ContentLength < 0 {
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
			switch {
			case len(body) > MaxBodyBytes:
				return errTooLarge
			case err != nil:
				return invalidArgument("the request body could not be read")
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, MaxBodyBytes+1)
		return next(c)
	}
}

// strictQuery refuses an API request whose query string does not parse, or
// that gives limit or cursor more than once: echo's QueryParam would drop
// the bad pair, or take the first, and a client's bug would read as success.
func strictQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.URL.RawQuery == "" {
			return next(c)
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return invalidArgument("the query string does not parse: " + err.Error())
		}
		for _, name := range []string{"limit", "cursor"} {
			if len(q[name]) > 1 {
				return invalidArgument(name + " is given more than once")
			}
		}
		return next(c)
	}
}
