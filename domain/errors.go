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
)
