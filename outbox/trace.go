package outbox

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// How a dispatch pass is traced. A claim serves many posts, each of its own
// trace, so it is a trace of its own: the "claim outbox" span, recorded only
// for a claim that returned rows (or failed), not for every idle poll. Each
// event's publish is a child of the trace context its row keeps (the API's
// create), linked to the claim that took it, and the ticket carries the
// publish's context to the worker: the post's trace goes on across the
// queue. Without tracing (the no-op provider) the publish "span" carries the
// stored context as it is, so a worker that traces still joins the post's
// trace.

// claimSpan records the claim that started at start and took n rows (or
// failed with err), and returns its context, which the publishes link to.
func (d *Dispatcher) claimSpan(ctx context.Context, start time.Time, n int, err error) trace.SpanContext {
	_, span := d.tracer.Start(ctx, "claim outbox", trace.WithTimestamp(start),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, attribute.Int("newsfeed.outbox.claimed", n)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return span.SpanContext()
}

// startPublishSpans starts one span per event and sets each event's
// TraceContext to it, for the ticket.
func (d *Dispatcher) startPublishSpans(ctx context.Context, claim trace.SpanContext, events []domain.Event) []trace.Span {
	spans := make([]trace.Span, len(events))
	link := trace.WithLinks(trace.Link{SpanContext: claim})
	for i := range events {
		e := &events[i]
		pctx, span := d.tracer.Start(traceparent.Into(ctx, e.TraceContext), "publish "+e.Type,
			trace.WithSpanKind(trace.SpanKindProducer), link,
			trace.WithAttributes(
				semconv.MessagingSystemKey.String("redis"),
				semconv.MessagingOperationTypeSend,
				attribute.Int64("newsfeed.outbox.id", e.ID),
				attribute.Int("newsfeed.outbox.attempt", e.Attempt),
			))
		e.TraceContext = traceparent.From(pctx)
		spans[i] = span
	}
	return spans
}

// endPublishSpans ends the spans with each event's ticket or error.
func endPublishSpans(spans []trace.Span, tickets []string, errs []error) {
	for i, span := range spans {
		if errs[i] != nil {
			span.SetStatus(codes.Error, errs[i].Error())
		} else {
			span.SetAttributes(semconv.MessagingMessageID(tickets[i]))
		}
		span.End()
	}
}
