package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPulledPosts(t *testing.T) {
	t.Parallel()

	t.Run("FirstHandlingMarksThePostPulledOnly", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		event := finParent(t, pool) // published once, never failed
		only, err := db.PostPulledOnly(t.Context(), 1)
		require.NoError(t, err)
		require.False(t, only, "a post nobody marked")

		require.NoError(t, db.MarkPostPulled(t.Context(), 1, event))
		only, err = db.PostPulledOnly(t.Context(), 1)
		require.NoError(t, err)
		require.True(t, only)
		require.NoError(t, db.MarkPostPulled(t.Context(), 1, event), "marking again")
		only, err = db.PostPulledOnly(t.Context(), 1)
		require.NoError(t, err)
		require.True(t, only)
	})

	t.Run("EventHandledBeforeMarksNothing", func(t *testing.T) {
		t.Parallel()
		// Whatever handled the event before may have pushed the post.
		db, pool := finSetup(t)
		for i, arrange := range []string{
			`UPDATE outbox SET attempts = 2 WHERE id = $1`,                                    // published again
			`UPDATE outbox SET failures = 1 WHERE id = $1`,                                    // failed before
			`UPDATE outbox SET attempts = 1, failures = 0, last_error = 'boom' WHERE id = $1`, // a dead row retried
		} {
			event := finParent(t, pool)
			finExec(t, pool, arrange, event)
			postID := int64(100 + i)
			require.NoError(t, db.MarkPostPulled(t.Context(), postID, event))
			only, err := db.PostPulledOnly(t.Context(), postID)
			require.NoError(t, err)
			require.False(t, only, "after %s", arrange)
		}
		require.NoError(t, db.MarkPostPulled(t.Context(), 200, 424242))
		only, err := db.PostPulledOnly(t.Context(), 200)
		require.NoError(t, err)
		require.False(t, only, "the event's row is gone")
	})

	t.Run("PushedIsForGoodInEitherOrder", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		event := finParent(t, pool)

		// Pulled, then pushed by a redelivery.
		require.NoError(t, db.MarkPostPulled(t.Context(), 1, event))
		require.NoError(t, db.MarkPostPushed(t.Context(), 1))
		only, err := db.PostPulledOnly(t.Context(), 1)
		require.NoError(t, err)
		require.False(t, only)

		// Pushed, then a slower handling pulls.
		require.NoError(t, db.MarkPostPushed(t.Context(), 2))
		require.NoError(t, db.MarkPostPulled(t.Context(), 2, event))
		require.NoError(t, db.MarkPostPushed(t.Context(), 2), "pushed again")
		only, err = db.PostPulledOnly(t.Context(), 2)
		require.NoError(t, err)
		require.False(t, only)
	})
}
