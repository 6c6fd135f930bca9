package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/health"
)

// Error is an error the client caused or must know about, with its status and
// a stable snake_case code.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

func invalidArgument(message string) *Error {
	return newError(http.StatusBadRequest, "invalid_argument", message)
}

// errInternal is what a recovered panic, or an error nothing recognises,
// becomes: a bug must not read as an outage.
var errInternal = newError(http.StatusInternalServerError, "internal", "internal error")

// errUnavailable is what a dependency failing becomes.
var errUnavailable = newError(http.StatusServiceUnavailable, "unavailable", "a backing service is unavailable; retry later")

// unavailableRetryAfter is the Retry-After of a 503 for a dependency, in
// seconds: the health watch pings the dependencies four times as often, so that
// a retry after it finds the outage known, or over.
const unavailableRetryAfter = "1"

// domainErrors maps domain sentinels to what the client sees.
var domainErrors = []struct {
	err error
	api *Error
}{
	{domain.ErrNotFound, newError(http.StatusNotFound, "not_found", "no such post")},
	{domain.ErrForbidden, newError(http.StatusForbidden, "forbidden", "only the author may do that")},
	{domain.ErrSelfFollow, newError(http.StatusUnprocessableEntity, "cannot_follow_self", "you cannot follow yourself")},
	{domain.ErrSelfRelation, newError(http.StatusUnprocessableEntity, "invalid_argument", "you cannot mute or block yourself")},
	{domain.ErrOwnPost, newError(http.StatusUnprocessableEntity, "invalid_argument", "you cannot repost your own post")},
	{domain.ErrBlocked, newError(http.StatusForbidden, "forbidden", "a block stands between you and this user")},
}

// echoStatusCodes maps the errors echo itself raises (routing, method).
var echoStatusCodes = map[int]*Error{
	http.StatusNotFound:              newError(http.StatusNotFound, "not_found", "no such route"),
	http.StatusMethodNotAllowed:      newError(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route"),
	http.StatusRequestEntityTooLarge: newError(http.StatusRequestEntityTooLarge, "too_large", "request body over 64 KiB"),
	http.StatusUnauthorized:          newError(http.StatusUnauthorized, "unauthenticated", "missing or invalid bearer token"),
}

// errorHandler writes every error as {"error": {"code", "message"}}. Errors
// the client did not cause are logged, with the request's id and no stack
// trace; their details never leave the server. A dependency failing
// (PostgreSQL or Redis down, silent past the request's deadline, refusing
// for a while) is 503 with Retry-After, so that clients and balancers
// retry; any other error is a bug, 500 internal, logged at error. While an
// outage that outages has logged explains a 503, it is logged at debug
// only: the outage is one line, not one per request.
func errorHandler(outages Outages) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		apiErr := classify(err)
		if apiErr.Status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", unavailableRetryAfter)
		}
		body := map[string]any{"error": map[string]string{"code": apiErr.Code, "message": apiErr.Message}}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(apiErr.Status)
		} else {
			_ = c.JSON(apiErr.Status, body)
		}
		if apiErr.Status < 500 || errors.Is(err, context.Canceled) {
			return
		}
		// The answer goes out first: finding out whether a dependency is
		// down may take a ping.
		_ = http.NewResponseController(c.Response().Writer).Flush()
		level := zapcore.ErrorLevel
		if apiErr.Status == http.StatusServiceUnavailable && outages != nil && outages.Explained(c.Request().Context(), err) {
			level = zapcore.DebugLevel
		}
		if ce := requestLog(c).Check(level, "request failed"); ce != nil {
			ce.Write(zap.String("method", c.Request().Method), zap.String("route", routeOf(c)),
				zap.Int("status", apiErr.Status), zap.Error(err))
		}
	}
}

func classify(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	for _, d := range domainErrors {
		if errors.Is(err, d.err) {
			return d.api
		}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		if mapped, ok := echoStatusCodes[he.Code]; ok {
			return mapped
		}
		if he.Code >= 400 && he.Code < 500 {
			return newError(he.Code, "invalid_argument", http.StatusText(he.Code))
		}
	}
	if outage(err) {
		return errUnavailable
	}
	return errInternal
}

// outage reports whether err is a dependency failing to serve rather than
// a bug: domain.ErrUnavailable, a deadline met waiting for PostgreSQL or
// Redis, a connection refused or broken, their own "not now" errors
// (health.IsOutage) — or a client that left, whose answer nobody reads.
func outage(err error) bool {
	return errors.Is(err, domain.ErrUnavailable) || errors.Is(err, context.Canceled) || health.IsOutage(err)
}
