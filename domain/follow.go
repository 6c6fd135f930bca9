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
