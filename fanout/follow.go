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
