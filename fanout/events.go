package fanout

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/newsfeed/newsfeed/domain"
)

// outcome is how an event that was handled without error ends.
type outcome int

const (
	// outcomeDone: the event is applied to every feed it touches; the worker
	// finishes it in the outbox and then acknowledges its ticket.
	outcomeDone outcome = iota
	// outcomeSplit: the fan-out was written as chunk events of its own (see
	// split); the worker acknowledges the ticket and leaves the event parked,
	// to be finished with the last of its chunks.
	outcomeSplit
)

// permanentError marks an event that no retry can fix (malformed payload,
// unknown type): it is parked dead at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return &permanentError{fmt.Errorf(format, args...)}
}

// handle applies one event to the feeds. Its outcome counts only when err is
// nil; an error is retried, unless it is permanent.
func (w *Worker) handle(ctx context.Context, t domain.Delivery) (outcome, error) {
	switch t.Type {
	case domain.PostCreated, domain.PostDeleted:
		var p domain.PostPayload
		if err := json.Unmarshal(t.Payload, &p); err != nil || p.PostID <= 0 || p.AuthorID <= 0 {
			return outcomeDone, permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		if t.Type == domain.PostCreated {
			return w.pushPost(ctx, t, p)
		}
		return outcomeDone, w.removePost(ctx, p)
	case domain.FanoutChunk:
		var c domain.ChunkPayload
		if err := json.Unmarshal(t.Payload, &c); err != nil || c.PostID <= 0 || c.AuthorID <= 0 || c.After < 0 || c.Until < 0 {
			return outcomeDone, permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		return outcomeDone, w.pushChunk(ctx, t, c)
	case domain.FollowCreated, domain.FollowDeleted:
		var p domain.FollowPayload
		if err := json.Unmarshal(t.Payload, &p); err != nil || p.FollowerID <= 0 || p.FolloweeID <= 0 {
			return outcomeDone, permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		return outcomeDone, w.applyFollowState(ctx, p) // either event: the state now decides
	case domain.RelationChanged:
		var p domain.RelationPayload
		if err := json.Unmarshal(t.Payload, &p); err != nil || p.UserID <= 0 || p.OtherID <= 0 || p.UserID == p.OtherID {
			return outcomeDone, permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		return outcomeDone, w.applyHideStates(ctx, p)
	default:
		return outcomeDone, permanent("unknown event type %q", t.Type)
	}
}
