package domain

import (
	"encoding/json"
	"time"
)

// Post is a post as the API and the feeds show it.
type Post struct {
	ID       int64 `json:"id"`
	AuthorID int64 `json:"author_id"`
	// Body is empty on a repost (and left out of its JSON): a post's
	// body never is.
	Body      string    `json:"body,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// RepostOf is the original a repost reposts; nil on a post.
	RepostOf *Post `json:"repost_of,omitempty"`

	// JSON, when set, is the post already encoded — as a cache held it — and
	// is written out as it is, so that a feed page does not decode and encode
	// every post again. Only ID need be set beside it.
	JSON json.RawMessage `json:"-"`
}

// postJSON has Post's fields without its methods.
type postJSON Post

// MarshalJSON writes the cached JSON when there is one.
func (p Post) MarshalJSON() ([]byte, error) {
	if p.JSON != nil {
		return p.JSON, nil
	}
	return json.Marshal(postJSON(p))
}

// IsRepost reports whether p reposts another post.
func (p Post) IsRepost() bool { return p.RepostOf != nil }

// OriginalID is the id of the post p shows: its own, or its original's.
func (p Post) OriginalID() int64 {
	if p.RepostOf != nil {
		return p.RepostOf.ID
	}
	return p.ID
}

// FeedPage is one page of a home feed.
type FeedPage struct {
	// Posts, newest first.
	Posts []Post
	// Next is the id to read below for the next page, 0 on the last page.
	Next int64
}

// Entry is a post as fan-out carries it into feeds: the post and its
// author, the two ids that always travel together (never as two bare
// int64s, whose order is easy to swap).
type Entry struct {
	PostID   int64
	AuthorID int64
}

// PushResult is what a push of an entry into followers' feeds did.
type PushResult struct {
	// Added is how many feeds gained the entry.
	Added int
	// Holders are the followers whose feed holds the entry now: it gained
	// it, or had it already. A feed that refused it (its reader unfollowed
	// the author since the page of followers was read, or it is below the
	// feed's bound) or that is not in Redis is not among them.
	Holders []int64
	// Missing are the followers whose feed is not in Redis: their next
	// read rebuilds it from PostgreSQL.
	Missing []int64
}

// Authors returns the post's author and, for a repost, its original's (0
// for a post), decoding the cached JSON when that is all the post holds.
// ok is false when that JSON does not decode.
func (p Post) Authors() (author, original int64, ok bool) {
	if p.JSON == nil {
		if p.RepostOf != nil {
			original = p.RepostOf.AuthorID
		}
		return p.AuthorID, original, true
	}
	var raw struct {
		AuthorID int64 `json:"author_id"`
		RepostOf *struct {
			AuthorID int64 `json:"author_id"`
		} `json:"repost_of"`
	}
	if err := json.Unmarshal(p.JSON, &raw); err != nil {
		return 0, 0, false
	}
	if raw.RepostOf != nil {
		original = raw.RepostOf.AuthorID
	}
	return raw.AuthorID, original, true
}

// PostFacts is what a post's fan-out reads before its pages of followers,
// in one round trip to PostgreSQL's primary.
type PostFacts struct {
	// Found: the post exists (deleted or not), by AuthorID.
	Found    bool
	AuthorID int64
	Deleted  bool
	// Followers is the author's follower count (maintained), and Pulled
	// whether their posts were ever pulled at read time (a celebrity, now
	// or before).
	Followers int64
	Pulled    bool
	// WritePosition is how far the primary's write-ahead log went at the
	// read: a page of followers read after it sees every change committed
	// before it.
	WritePosition int64
}
