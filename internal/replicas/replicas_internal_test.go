package replicas

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// A Wait whose primaries are not those its Begin saw fails: a write that
// a replaced primary took may be missing on its successor.
func TestWaitFailsWhenThePrimariesChanged(t *testing.T) {
	if testenv.RedisClusterURL() == "" {
		t.Skip("needs the Redis Cluster: make cluster-up; NEWSFEED_TEST_REDIS_CLUSTER_URL")
	}
	testenv.HoldReplicas(t)
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	w := New(rdb, prefix, 1, time.Second)
	ctx := context.Background()
	since := w.Begin(ctx)
	if len(since.primaries) != 3 {
		t.Fatalf("Begin saw %v, want the 3 primaries", since.primaries)
	}
	if err := w.Wait(ctx, since); err != nil {
		t.Fatalf("nothing changed: %v", err)
	}
	before := Topology{primaries: append([]string{"127.0.0.1:1"}, since.primaries[1:]...)} // as if one was replaced
	err := w.Wait(ctx, before)
	var re *Error
	if !errors.As(err, &re) || re.Node != "" {
		t.Fatalf("want a topology error, got %v", err)
	}

	// Every primary got a marker in a slot of its own.
	cc := rdb.(*redis.ClusterClient)
	for addr, n := range w.tags {
		node, err := cc.MasterForKey(ctx, "{"+strconv.Itoa(n)+"}")
		if err != nil || node.Options().Addr != addr {
			t.Errorf("tag %d of %s is on %v (%v)", n, addr, node, err)
		}
	}
}
