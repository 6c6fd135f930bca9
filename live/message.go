package live

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// The kinds of message a hub's inbox takes.
const (
	kindPost     = "post"     // Post by Author is in the feeds of Users
	kindRemove   = "remove"   // Post left the feeds of Users
	kindUnsure   = "unsure"   // the feeds of Users are not in Redis: read them again
	kindHid      = "hid"      // what the feeds of Users hide changed: read them again, send what left and came
	kindPulled   = "cpost"    // Post by the celebrity Author: for their followers
	kindUnpulled = "cremove"  // Post by the celebrity Author was deleted
	kindUnfollow = "unfollow" // Users[0] no longer follows Author
	kindFollow   = "follow"   // Users[0] follows Author now
)

// message is what a publisher sends to a hub's inbox.
type message struct {
	Kind   string  `json:"k"`
	Post   int64   `json:"p,omitempty"`
	Author int64   `json:"a,omitempty"`
	Users  []int64 `json:"u,omitempty"`
	// At is when the publisher sent it, in Unix milliseconds: a post
	// announced before a stream opened was in the feed when the stream
	// read it, and is not sent again.
	At int64 `json:"t,omitempty"`
}

// presenceChange is what a hub announces on the presence channel: User has
// N streams on Instance now (0: none); Gone, the hub stopped.
type presenceChange struct {
	Instance string `json:"i"`
	User     int64  `json:"u,omitempty"`
	N        int    `json:"n,omitempty"`
	Gone     bool   `json:"gone,omitempty"`
}

// Leases: a hub renews its presence every leaseRenew, and what it wrote
// lives for lease, so that a hub that died is forgotten within lease.
const (
	lease      = 30 * time.Second
	leaseRenew = 10 * time.Second
)

// reloadEvery is how often a publisher reads the whole presence again,
// besides the changes it is told of.
const reloadEvery = 5 * time.Second

// newID is a random identifier for an instance or a stream.
func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
