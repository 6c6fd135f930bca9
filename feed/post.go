package feed

import (
	"encoding/json"
	"time"
)

// Post is a post as feeds show it.
type Post struct {
	ID        int64     `json:"id"`
	AuthorID  int64     `json:"author_id"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`

	// cached is the post's JSON as the post cache holds it, when the post
	// came from there: a feed page is written out without decoding and
	// encoding every post again. Only ID is set beside it.
	cached json.RawMessage
}

// postJSON has Post's fields without its methods.
type postJSON Post

// MarshalJSON writes the cached JSON when there is one.
func (p Post) MarshalJSON() ([]byte, error) {
	if p.cached != nil {
		return p.cached, nil
	}
	return json.Marshal(postJSON(p))
}
