package domain

import "time"

// Follow is one edge of the social graph as listings show it: the other
// user and since when.
type Follow struct {
	UserID int64     `json:"user_id"`
	Since  time.Time `json:"since"`
}

// FollowCursor is a position in a newest-first follow listing.
type FollowCursor struct {
	Since  time.Time
	UserID int64
}

// EdgeState is whether Follower follows Followee, as of Version of the
// follower's graph: every change to whom a user follows takes the next
// version of that user's graph, in the PostgreSQL transaction that makes it.
// Redis applies an EdgeState only when it is newer than the one it holds, so
// that states applied late, twice or out of order cannot undo a newer one.
type EdgeState struct {
	Follower, Followee int64
	Following          bool
	Version            int64
	// Followees is how many accounts Follower follows as of Version (0
	// when the change did not say): a reader who follows many is read from
	// PostgreSQL instead of being fanned out to (fanout.following_threshold).
	Followees int64
}

// EdgeChange is a follow or an unfollow as PostgreSQL committed it: the
// state it left, and whether it changed anything (following twice does
// not, yet takes a version all the same).
type EdgeChange struct {
	EdgeState
	Changed bool
}
