package domain

import (
	"encoding/json"
	"testing"
)

func TestEventAggregate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ, payload string
		want         Aggregate
		ok           bool
	}{
		{PostCreated, `{"post_id": 7, "author_id": 3}`, Aggregate{"post", 7}, true},
		{PostDeleted, `{"post_id": 8, "author_id": 3}`, Aggregate{"post", 8}, true},
		{FanoutChunk, `{"post_id": 9, "author_id": 3, "after": 10, "until": 20}`, Aggregate{"post", 9}, true},
		{FollowCreated, `{"follower_id": 5, "followee_id": 6}`, Aggregate{"user", 5}, true},
		{FollowDeleted, `{"follower_id": 5, "followee_id": 6}`, Aggregate{"user", 5}, true},
		{PostCreated, `{"author_id": 3}`, Aggregate{}, false},
		{PostCreated, `not json`, Aggregate{}, false},
		{"something.else", `{"post_id": 7}`, Aggregate{}, false},
	} {
		got, ok := Event{Type: c.typ, Payload: json.RawMessage(c.payload)}.Aggregate()
		if got != c.want || ok != c.ok {
			t.Errorf("%s %s: got %v, %v; want %v, %v", c.typ, c.payload, got, ok, c.want, c.ok)
		}
	}
	if s := (Aggregate{"post", 7}).String(); s != "post 7" {
		t.Errorf("String() = %q", s)
	}
}
