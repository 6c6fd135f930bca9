package api

import (
	"context"
	"crypto/rand"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/logctx"
)

// What an operator sees of each request: its id (X-Request-Id, taken from
// the client or made here, echoed in the response), a logger that carries
// the id to every line logged for the request (the error handler's too), a
// span when tracing is on, and one access log line. None of it holds the
// Authorization header or the query string, where a stream's access_token
// travels.

// maxRequestIDLen bounds an X-Request-Id taken from a client.
const maxRequestIDLen = 128

// maxLoggedPathLen bounds the path written to the access log: a client that
// sends a 60 KiB path to a route that does not exist gets 404, not 60 KiB
// of log.
const maxLoggedPathLen = 256

// requestID returns the client's X-Request-Id when it is 1 to 128 of the
// characters ids are made of (letters, digits, "-._~:/+="), else a new one:
// nothing a client sends lands in a log or a header unchecked.
func requestID(given string) string {
	if given != "" && len(given) <= maxRequestIDLen && saneID(given) {
		return given
	}
	return rand.Text() // 26 characters, 130 random bits
}

func saneID(s string) bool {
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == ':', c == '/', c == '+', c == '=':
		default:
			return false
		}
	}
	return true
}

// requestLog is the logger of the request: the server's, with the request
// id, which observe put in the request's context (where the adapters the
// request calls find it too).
func requestLog(c echo.Context) *zap.Logger {
	return logctx.From(c.Request().Context(), zap.NewNop())
}

// routeOf is the route pattern that served the request ("/v1/posts/:id"),
// or "unmatched": bounded, whatever paths clients send.
func routeOf(c echo.Context) string {
	if route := c.Path(); route != "" {
		return route
	}
	return "unmatched"
}

// observe is the outermost middleware: the request id, the request's
// logger, its span and its access log line.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		r := c.Request()
		id := requestID(r.Header.Get(echo.HeaderXRequestID))
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		log := s.log.With(zap.String("request_id", id))
		ctx := logctx.With(r.Context(), log)
		var span trace.Span
		if s.tracing {
			ctx, span = s.startRequestSpan(ctx, c, id)
		}
		c.SetRequest(r.WithContext(ctx))

		if err := next(c); err != nil {
			c.Error(err) // written now, so that the status logged is the one sent
		}

		status := c.Response().Status
		if span != nil {
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if user := userID(c); user > 0 {
				span.SetAttributes(attribute.Int64("newsfeed.user_id", user))
			}
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			span.End()
		}
		if ce := log.Check(s.accessLevel(c), "request"); ce != nil {
			ce.Write(s.accessFields(c, ctx, status, time.Since(start))...)
		}
		return nil
	}
}

// accessLevel is the level of the request's access log line: the
// configured one, but debug for the operations routes, which balancers and
// scrapers call every few seconds.
func (s *Server) accessLevel(c echo.Context) zapcore.Level {
	switch c.Path() {
	case opsMetrics, opsHealth, opsReady:
		return zapcore.DebugLevel
	}
	return s.cfg.AccessLogLevel
}

// accessFields are the fields of a request's access log line, the request
// id aside (the logger has it).
func (s *Server) accessFields(c echo.Context, ctx context.Context, status int, took time.Duration) []zap.Field {
	r := c.Request()
	path := r.URL.Path // never RawQuery: a stream's access_token is there
	if len(path) > maxLoggedPathLen {
		path = path[:maxLoggedPathLen]
	}
	fields := make([]zap.Field, 0, 10)
	fields = append(fields,
		zap.String("method", r.Method),
		zap.String("route", routeOf(c)),
		zap.String("path", path),
		zap.Int("status", status),
		zap.Duration("duration", took),
		zap.Int64("bytes_out", c.Response().Size),
		zap.String("remote", r.RemoteAddr),
	)
	if user := userID(c); user > 0 {
		fields = append(fields, zap.Int64("user_id", user))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsSampled() {
		fields = append(fields, zap.String("trace_id", sc.TraceID().String()))
	}
	return fields
}

// startRequestSpan starts the request's server span, the child of the
// caller's trace context if it sent one (a gateway's traceparent). Its
// attributes leave the query string out, like the access log.
//
// A middleware of our own rather than otelecho: that package is deprecated
// and removed upstream (its successor is for echo v5), and what it records
// of a request is not ours to choose — a span attribute with the query
// string would carry a stream's access_token to the collector.
func (s *Server) startRequestSpan(ctx context.Context, c echo.Context, id string) (context.Context, trace.Span) {
	r := c.Request()
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	route := routeOf(c)
	return s.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.HTTPRoute(route),
			semconv.URLPath(r.URL.Path),
			attribute.String("newsfeed.request_id", id),
		))
}

// degraded logs a failure the request survives (a feed left to its event
// to fix): at warn, or at debug while a known outage explains it.
func (s *Server) degraded(c echo.Context, msg string, err error, fields ...zap.Field) {
	logAside(c.Request().Context(), s.cfg.Outages, requestLog(c), msg, err, fields...)
}

// logAside is health.Log in a goroutine of its own: telling whether an
// outage explains a failure may take a round of pings (up to a second with
// the dependency silent), which a request that goes on without the
// dependency must not wait for. The line keeps the request's id.
func logAside(ctx context.Context, outages health.Explainer, log *zap.Logger, msg string, err error, fields ...zap.Field) {
	ctx = context.WithoutCancel(ctx)
	go health.Log(ctx, outages, log, msg, err, fields...)
}
