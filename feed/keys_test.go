package feed_test

import (
	"strings"
	"testing"

	"github.com/newsfeed/newsfeed/feed"
)

// TestKey pins the home feed key's format: the user's id in a hash tag, so
// that a user's keys share one Redis Cluster slot.
func TestKey(t *testing.T) {
	if got, want := feed.Key("nf:", 42), "nf:feed:{42}"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	if !strings.HasPrefix(feed.Key("nf:", 42), feed.KeyPrefix("nf:")) {
		t.Fatalf("Key %q does not begin with KeyPrefix %q", feed.Key("nf:", 42), feed.KeyPrefix("nf:"))
	}
}
