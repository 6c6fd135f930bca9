// Package traceparent carries a span's context between processes as one
// string, the W3C traceparent ("00-<trace id>-<span id>-<flags>"): in the
// outbox row that an API request writes (store), then in the queue ticket
// that the dispatcher publishes (queue), so that one post's delivery is one
// trace across serve, dispatch and work.
//
// It needs no tracer provider: the format is fixed (W3C Trace Context,
// whatever propagator the process set globally), and a process whose tracing
// is off passes the context it received on unchanged. tracestate is not
// carried: nothing in newsfeed's path sets it.
package traceparent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const header = "traceparent"

var format propagation.TraceContext

// carrier holds the one header TraceContext reads and writes, without the
// map a propagation.MapCarrier would allocate.
type carrier struct{ value string }

func (c *carrier) Get(key string) string {
	if key == header {
		return c.value
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == header {
		c.value = value
	}
}

func (c *carrier) Keys() []string { return []string{header} }

// From returns the traceparent of the span in ctx, or "" when ctx holds no
// valid span context (tracing is off and nothing was received).
func From(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	format.Inject(ctx, &c)
	return c.value
}

// Into returns ctx with the remote span context that value names, to be the
// parent of the spans started from it. An empty or malformed value returns
// ctx as it is: the work is traced, if at all, as a trace of its own.
func Into(ctx context.Context, value string) context.Context {
	if value == "" {
		return ctx
	}
	return format.Extract(ctx, &carrier{value: value})
}
