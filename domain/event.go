package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event types written to the outbox. Each names the change it announces.
const (
	PostCreated   = "post.created"
	PostDeleted   = "post.deleted"
	FollowCreated = "follow.created"
	FollowDeleted = "follow.deleted"
	// RelationChanged: a mute, unmute, block or unblock between two users.
	RelationChanged = "relation.changed"
	// FanoutChunk is one chunk of a big post.created fan-out: the
	// followers in (After, Until] of one post.
	FanoutChunk = "fanout.chunk"
)

// Event is one outbox row — the intent to deliver a change, written in the
// change's transaction — as the dispatcher claims it and the queue carries it.
type Event struct {
	// ID is the outbox row id.
	ID int64
	// Type is one of the event type constants.
	Type string
	// Payload is the JSON body of the event (PostPayload or FollowPayload).
	Payload json.RawMessage
	// Attempt counts claims of this row, this one included (1 on the first).
	Attempt int
	// Failures counts the failed attempts before this one.
	Failures int
	// Ticket is the queue entry of the row's last publication, if any.
	Ticket string
	// CreatedAt is when the change committed; delivery latency starts here.
	CreatedAt time.Time
	// TraceContext is the W3C traceparent of the span the event's work
	// continues: as claimed, the span that wrote the row; in a ticket, the
	// dispatcher's publish. Empty when nothing was traced.
	TraceContext string
}

// PostPayload is the payload of post.created and post.deleted.
type PostPayload struct {
	PostID   int64 `json:"post_id"`
	AuthorID int64 `json:"author_id"`
}

// ChunkPayload is the payload of fanout.chunk.
type ChunkPayload struct {
	PostID   int64 `json:"post_id"`
	AuthorID int64 `json:"author_id"`
	// After and Until bound the follower ids of the chunk: After < id <= Until.
	// Until 0 means no upper bound (the last chunk).
	After int64 `json:"after"`
	Until int64 `json:"until"`
}

// FollowPayload is the payload of follow.created and follow.deleted.
type FollowPayload struct {
	FollowerID int64 `json:"follower_id"`
	FolloweeID int64 `json:"followee_id"`
}

// Delivery is an event as a fan-out worker receives it from the queue.
type Delivery struct {
	// MessageID is the queue's id of this delivery (a stream entry id).
	MessageID string
	// Deliveries counts how often the queue delivered it (1 at first).
	Deliveries int64
	Event
}

// OutboxStats counts outbox rows by state: what `newsfeed outbox stats`
// prints and the outbox gauges export.
type OutboxStats struct {
	// Pending rows wait to be published.
	Pending int64 `json:"pending"`
	// InFlight rows are claimed or published and not finished yet.
	InFlight int64 `json:"in_flight"`
	// Dead rows gave up; an operator may retry them.
	Dead int64 `json:"dead"`
	// OldestPendingAge is the age of the oldest row not finished nor dead.
	OldestPendingAge time.Duration `json:"-"`
}

// Aggregate is what an outbox event is about: a post, or a user whose
// follows changed.
type Aggregate struct {
	// Type is "post" or "user".
	Type string `json:"type"`
	// ID is the post's or the user's id.
	ID int64 `json:"id"`
}

func (a Aggregate) String() string { return fmt.Sprintf("%s %d", a.Type, a.ID) }

// Aggregate reads from the payload what the event is about: the post of
// post.created, post.deleted and fanout.chunk, the follower of
// follow.created and follow.deleted (whose feed the event changes). ok is
// false for a type or a payload it cannot read.
func (e Event) Aggregate() (a Aggregate, ok bool) {
	switch e.Type {
	case PostCreated, PostDeleted, FanoutChunk:
		var p PostPayload
		if json.Unmarshal(e.Payload, &p) != nil || p.PostID == 0 {
			return Aggregate{}, false
		}
		return Aggregate{Type: "post", ID: p.PostID}, true
	case FollowCreated, FollowDeleted:
		var p FollowPayload
		if json.Unmarshal(e.Payload, &p) != nil || p.FollowerID == 0 {
			return Aggregate{}, false
		}
		return Aggregate{Type: "user", ID: p.FollowerID}, true
	case RelationChanged:
		var p RelationPayload
		if json.Unmarshal(e.Payload, &p) != nil || p.UserID == 0 {
			return Aggregate{}, false
		}
		return Aggregate{Type: "user", ID: p.UserID}, true
	}
	return Aggregate{}, false
}

// DeadEvent is an outbox event parked as dead, as an operator inspects it
// before retrying it.
type DeadEvent struct {
	// Event is the row: its Attempt counts every publication, Failures the
	// failed ones.
	Event
	// LastError is why its last attempt failed.
	LastError string
	// DiedAt is when it was parked dead; zero for a row parked before the
	// schema recorded it.
	DiedAt time.Time
}
