package replicas

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

func TestErrorIsUnavailable(t *testing.T) {
	cause := errors.New("connection refused")
	for _, err := range []error{
		&Error{Node: "a:1", Acked: 0, Want: 1},
		&Error{Node: "a:1", Reason: "wait for replicas", Err: cause},
		&Error{Reason: "the primaries changed"},
	} {
		if !errors.Is(err, domain.ErrUnavailable) {
			t.Errorf("%v is not domain.ErrUnavailable", err)
		}
	}
	if err := (&Error{Node: "a:1", Reason: "x", Err: cause}); !errors.Is(err, cause) {
		t.Errorf("%v does not wrap its cause", err)
	}
}

// A Wait whose key owners are not those its Begin saw fails: a write that
// a replaced primary took may be missing on its successor. One whose owners
// are the same waits on each owner alone.
func TestWaitFailsWhenTheOwnersChanged(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	testenv.HoldReplicas(t)
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	w := New(rdb, prefix, 1, time.Second)
	ctx := context.Background()
	keys := []string{prefix + "feed:{1}", prefix + "feed:{2}", prefix + "feed:{3}", prefix + "feed:{4}"}
	since := w.Begin(ctx, keys...)
	if len(since.nodes) < 2 {
		t.Fatalf("Begin saw %v: the keys should spread over the primaries", since.nodes)
	}
	if err := w.Wait(ctx, since); err != nil {
		t.Fatalf("nothing changed: %v", err)
	}
	var addr string
	for a := range since.nodes {
		addr = a
	}
	moved := Topology{nodes: map[string][]string{"127.0.0.1:1": since.nodes[addr]}} // as if it was replaced
	err := w.Wait(ctx, moved)
	var re *Error
	if !errors.As(err, &re) || re.Node != "127.0.0.1:1" || !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("want an error naming the replaced primary, got %v", err)
	}
	if got := w.Failed(w.WaitEach(ctx, moved), moved, since.nodes[addr][0]); got == nil {
		t.Errorf("the key of the replaced primary is not in doubt")
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"nf:feed:{42}":   "42",
		"nf:tickets:{3}": "3",
		"nf:tickets":     "nf:tickets", // no tag: the whole key
		"nf:{}:x":        "nf:{}:x",    // an empty tag hashes the whole key
		"a{b}c{d}":       "b",          // the first tag
		"nf:{unclosed":   "nf:{unclosed",
	} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}
