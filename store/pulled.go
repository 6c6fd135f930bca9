package store

import (
	"context"
	"fmt"
)

// MarkPostPulled records that a post goes to its author's timeline and to no
// feed (a celebrity's post), before it is added to the timeline. Only the
// first handling of its post.created event, eventID, can say so: the
// worker passes it only for a first delivery, and the row must not have been
// published or failed before (attempts, failures, or a last_error that an
// operator's retry of a dead row keeps). A later handling may follow one
// that pushed the post, so it leaves no mark, and the post's delete cleans
// the feeds. A post marked pushed stays so.
func (db *DB) MarkPostPulled(ctx context.Context, postID, eventID int64) error {
	_, err := db.primary.Exec(ctx, `
INSERT INTO pulled_posts (post_id)
SELECT $1 WHERE EXISTS (
    SELECT 1 FROM outbox WHERE id = $2 AND attempts <= 1 AND failures = 0 AND last_error IS NULL)
ON CONFLICT (post_id) DO NOTHING`, postID, eventID)
	if err != nil {
		return fmt.Errorf("mark post %d pulled: %w", postID, err)
	}
	return nil
}

// MarkPostPushed records, for good, that a post goes (or went) into feeds,
// before it is pushed: its delete must clean the feeds, whatever another
// handling of its event recorded.
func (db *DB) MarkPostPushed(ctx context.Context, postID int64) error {
	_, err := db.primary.Exec(ctx, `
INSERT INTO pulled_posts (post_id, pushed) VALUES ($1, true)
ON CONFLICT (post_id) DO UPDATE SET pushed = true WHERE NOT pulled_posts.pushed`, postID)
	if err != nil {
		return fmt.Errorf("mark post %d pushed: %w", postID, err)
	}
	return nil
}

// PostPulledOnly reports whether a post went to its author's timeline and to
// no feed, so that its delete need not visit the followers' feeds.
func (db *DB) PostPulledOnly(ctx context.Context, postID int64) (bool, error) {
	var only bool
	err := db.primary.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM pulled_posts WHERE post_id = $1 AND NOT pushed)`, postID).Scan(&only)
	if err != nil {
		return false, fmt.Errorf("pulled post %d: %w", postID, err)
	}
	return only, nil
}
