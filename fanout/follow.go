package fanout

import (
	"context"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// applyFollowState applies the follow state PostgreSQL has now, with its
// version, not what the event says (follow.created and follow.deleted
// alike): an event handled late, twice or out of order (an unfollow's
// before its follow's) applies the current state, which Redis takes only
// if it is newer than the one it holds. So a handler overtaken between its
// read and its write — by the API's application of a newer change, or by
// the newer change's own event — changes nothing.
func (w *Worker) applyFollowState(ctx context.Context, p domain.FollowPayload) error {
	st, err := w.graph.FollowState(ctx, p.FollowerID, p.FolloweeID)
	if err != nil {
		return err
	}
	failpoint.Hit(ctx, failpoint.BeforeApply)
	added, applied, err := w.feeds.ApplyFollow(ctx, st)
	w.metrics.entries.Add(float64(added))
	if err != nil || !applied {
		return err
	}
	if st.Following {
		w.cfg.Live.Followed(ctx, p.FollowerID, p.FolloweeID)
	} else {
		w.cfg.Live.Unfollowed(ctx, p.FollowerID, p.FolloweeID)
	}
	return nil
}

// applyHideStates applies what PostgreSQL says now of whether each of the
// two users' feeds hides the other, with the versions of their graphs
// (relation.changed: a mute, a block or their undoing). Like follows, a
// state handled late is stale in Redis and changes nothing.
func (w *Worker) applyHideStates(ctx context.Context, p domain.RelationPayload) error {
	states, err := w.graph.HideStates(ctx, p.UserID, p.OtherID)
	if err != nil {
		return err
	}
	failpoint.Hit(ctx, failpoint.BeforeApply)
	var changed []int64
	for _, st := range states {
		applied, err := w.feeds.ApplyHide(ctx, st)
		if err != nil {
			return err
		}
		if applied {
			changed = append(changed, st.Reader)
		}
	}
	if len(changed) > 0 {
		w.cfg.Live.Hid(ctx, changed)
	}
	return nil
}
