package domain

import (
	"encoding/json"
	"time"
)

// Post is a post as the API and the feeds show it.
type Post struct {
	ID        int64     `json:"id"`
	AuthorID  int64     `json:"author_id"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`

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

// FeedPage is one page of a home feed.
type FeedPage struct {
	// Posts, newest first.
	Posts []Post
	// Next is the id to read below for the next page, 0 on the last page.
	Next int64
}
