package domain

// Relation is a kind of hiding between two users: a mute (one way: the
// muter's feed hides the muted) or a block (both ways, and no follows).
type Relation string

// The relations.
const (
	Mute  Relation = "mute"
	Block Relation = "block"
)

// HideState is whether Reader's home feed hides the entries of Other (Other
// is muted by Reader, or either blocks the other), as of Version of the
// reader's graph: mutes and blocks take versions from the same per-user
// sequence as follows (EdgeState), so Redis applies them in order too.
type HideState struct {
	Reader, Other int64
	Hidden        bool
	Version       int64
}

// RelationChange is a mute, unmute, block or unblock as PostgreSQL committed
// it: the hide states it left for each reader whose feed it concerns (the
// caller's; for blocks also the other user's), and the follows a block
// removed (with the versions they took).
type RelationChange struct {
	Hides    []HideState
	Unfollow []EdgeChange
	Changed  bool
}

// RelationPayload is the payload of relation.changed: Redis applies the
// hide states between the two users again, should the request's own
// application have failed.
type RelationPayload struct {
	UserID  int64 `json:"user_id"`
	OtherID int64 `json:"other_id"`
}
