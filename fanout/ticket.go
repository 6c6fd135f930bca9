package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/health"
)

// process handles one ticket from start to acknowledgement, in its span.
func (w *Worker) process(ctx context.Context, t domain.Delivery) {
	ctx, span := w.startTicketSpan(ctx, t)
	outcome := w.processTraced(ctx, t)
	endTicketSpan(span, outcome)
}

// processTraced is process within the ticket's span; it returns the outcome
// that newsfeed_fanout_tickets_total counted.
func (w *Worker) processTraced(ctx context.Context, t domain.Delivery) string {
	log := w.log.With(zap.Int64("outbox_id", t.ID), zap.String("type", t.Type), zap.String("message_id", t.MessageID))
	if t.Deliveries > w.cfg.MaxDeliveries {
		w.bury(ctx, log, t, fmt.Sprintf("delivered %d times without finishing", t.Deliveries))
		return "dead"
	}

	stopHeartbeat := w.heartbeat(ctx, log, t)
	out, err := w.handle(ctx, t)
	stopHeartbeat()

	switch {
	case ctx.Err() != nil:
		w.metrics.tickets.WithLabelValues(t.Type, "abandoned").Inc()
		return "abandoned" // shutting down: the ticket stays pending and is redelivered
	case err == nil && out == outcomeSplit:
		// The chunks are events of their own now; the parent finishes with
		// the last of them.
		w.ack(ctx, log, t)
		w.metrics.tickets.WithLabelValues(t.Type, "split").Inc()
		return "split"
	case err == nil:
		if err := w.finish(ctx, t); err != nil {
			w.warn(ctx, log, "cannot record finished fan-out; the ticket will be redelivered", err)
			return "unrecorded"
		}
		w.ack(ctx, log, t)
		w.metrics.tickets.WithLabelValues(t.Type, "done").Inc()
		return "done"
	case errors.As(err, new(*permanentError)):
		w.bury(ctx, log, t, err.Error())
		return "dead"
	case errors.Is(err, domain.ErrUnavailable):
		// Not the event's failure: tried again soon, not counted. The
		// metric counts it once the outbox row is pending again, so that
		// what it says is already true of the row.
		retryIn := w.cfg.Backoff.Postpone(t.Attempt)
		if perr := w.outbox.Postpone(ctx, t.ID, retryIn, err.Error()); perr != nil {
			w.warn(ctx, log, "fan-out postponed and cannot be rescheduled; the ticket will be redelivered",
				perr, zap.NamedError("cause", err))
			return "unrecorded"
		}
		w.metrics.tickets.WithLabelValues(t.Type, "postponed").Inc()
		log.Warn("fan-out postponed: a dependency is not ready; the dispatcher will publish it again",
			zap.Error(err), zap.Duration("retry_in", retryIn))
		w.ack(ctx, log, t)
		return "postponed"
	default:
		w.metrics.tickets.WithLabelValues(t.Type, "failed").Inc()
		dead, ferr := w.outbox.Fail(ctx, t.ID, w.cfg.MaxAttempts, w.cfg.Backoff.Delay(t.Failures+1), err.Error())
		if ferr != nil {
			w.warn(ctx, log, "fan-out failed and cannot be rescheduled; the ticket will be redelivered",
				ferr, zap.NamedError("cause", err))
			return "failed"
		}
		if dead {
			log.Error("fan-out failed for the last time; event is dead", zap.Error(err))
			if err := w.queue.DeadLetter(ctx, t, err.Error()); err != nil {
				w.warn(ctx, log, "cannot dead-letter ticket", err)
			}
			return "dead"
		}
		w.warn(ctx, log, "fan-out failed; the dispatcher will publish it again after a backoff", err)
		w.ack(ctx, log, t) // the outbox row is pending again and owns the retry
		return "failed"
	}
}

// warn logs a failure at warn, or at debug while a known outage explains it.
func (w *Worker) warn(ctx context.Context, log *zap.Logger, msg string, err error, fields ...zap.Field) {
	health.Log(ctx, w.cfg.Outages, log, msg, err, fields...)
}

// finish records the event finished and observes the delivery latency of a
// post whose fan-out this call completed: once per post, however often its
// tickets are delivered.
func (w *Worker) finish(ctx context.Context, t domain.Delivery) error {
	var done bool
	var latency time.Duration
	var err error
	if t.Type == domain.FanoutChunk {
		done, latency, err = w.outbox.FinishChunk(ctx, t.ID)
	} else {
		done, latency, err = w.outbox.FinishEvent(ctx, t.ID)
	}
	delivers := t.Type == domain.PostCreated || t.Type == domain.FanoutChunk
	if err == nil && done && delivers {
		w.metrics.delivery.Observe(latency.Seconds())
	}
	return err
}

func (w *Worker) bury(ctx context.Context, log *zap.Logger, t domain.Delivery, cause string) {
	w.metrics.tickets.WithLabelValues(t.Type, "dead").Inc()
	log.Error("event is dead", zap.String("cause", cause))
	if err := w.outbox.Bury(ctx, t.ID, cause); err != nil {
		w.warn(ctx, log, "cannot park event as dead; the ticket will be redelivered", err)
		return
	}
	if err := w.queue.DeadLetter(ctx, t, cause); err != nil {
		w.warn(ctx, log, "cannot dead-letter ticket", err)
	}
}

func (w *Worker) ack(ctx context.Context, log *zap.Logger, t domain.Delivery) {
	if err := w.queue.Ack(ctx, t.MessageID); err != nil {
		// Harmless: the ticket is redelivered and its fan-out changes nothing.
		w.warn(ctx, log, "cannot acknowledge ticket", err)
	}
}

// heartbeat keeps a long fan-out from being taken over (queue) or published
// again (outbox) while this worker is still on it.
func (w *Worker) heartbeat(ctx context.Context, log *zap.Logger, t domain.Delivery) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(w.cfg.ClaimIdle / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := w.queue.Touch(ctx, w.cfg.Consumer, t.MessageID); err != nil && ctx.Err() == nil {
					w.warn(ctx, log, "heartbeat to queue failed", err)
				}
				if err := w.outbox.Extend(ctx, t.ID, w.cfg.RedeliverAfter); err != nil && ctx.Err() == nil {
					w.warn(ctx, log, "heartbeat to outbox failed", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
