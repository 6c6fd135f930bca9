package domain

import "errors"

// The errors a user can cause. Adapters return them (wrapped or not); the API
// maps each to its status and code.
var (
	// ErrNotFound: the post does not exist or was deleted.
	ErrNotFound = errors.New("not found")
	// ErrForbidden: a user changes something that is not theirs.
	ErrForbidden = errors.New("forbidden")
	// ErrSelfFollow: a user tries to follow themselves.
	ErrSelfFollow = errors.New("cannot follow yourself")
	// ErrSelfRelation: a user tries to mute or block themselves.
	ErrSelfRelation = errors.New("cannot mute or block yourself")
	// ErrOwnPost: a user tries to repost their own post.
	ErrOwnPost = errors.New("cannot repost your own post")
	// ErrBlocked: a follow while a block stands between the two users.
	ErrBlocked = errors.New("a block stands between these users")
)

// ErrUnavailable marks an error of a dependency that is not ready to take
// the work now (Redis's replicas behind, say), as opposed to an error of the
// work itself: background work that meets it is tried again later without
// counting the attempt against the event.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrNotDead is what retrying an outbox event that is not dead returns.
var ErrNotDead = errors.New("only a dead event can be retried")
