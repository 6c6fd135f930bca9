package fanout

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// How a ticket is traced: its fan-out is a span ("fanout <type>"), the
// child of the trace context the ticket carries (the dispatcher's publish,
// itself the child of the API's create), and each page of followers it
// writes is a span under it: one per page, never one per follower, so that
// a fan-out to a million costs a thousand spans when traced and nothing
// measurable when not. The chunks a big fan-out splits into keep its context
// (store.SplitFanout), so their fan-outs are in the post's trace too.

// startTicketSpan starts the span of t's fan-out.
func (w *Worker) startTicketSpan(ctx context.Context, t domain.Delivery) (context.Context, trace.Span) {
	return w.tracer.Start(traceparent.Into(ctx, t.TraceContext), "fanout "+t.Type,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("redis"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingMessageID(t.MessageID),
			attribute.Int64("newsfeed.outbox.id", t.ID),
			attribute.Int64("newsfeed.ticket.deliveries", t.Deliveries),
		))
}

// endTicketSpan ends the span with the ticket's outcome, as
// newsfeed_fanout_tickets_total counts it.
func endTicketSpan(span trace.Span, outcome string) {
	span.SetAttributes(attribute.String("newsfeed.fanout.outcome", outcome))
	switch outcome {
	case "failed", "dead", "unrecorded":
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// page runs fn on one page of followers in a span of its own; with tracing
// off, without one.
func (w *Worker) page(ctx context.Context, followers []int64, fn func(context.Context, []int64) error) error {
	if !w.tracing {
		return fn(ctx, followers)
	}
	ctx, span := w.tracer.Start(ctx, "follower page", trace.WithAttributes(attribute.Int("newsfeed.page.followers", len(followers))))
	defer span.End()
	err := fn(ctx, followers)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
