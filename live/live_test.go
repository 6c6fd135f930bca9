package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/live"
)

// The hub and the publisher each run loops and stream readers in
// goroutines; none may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// posts hydrates any id as a post by author 9.
type posts struct{}

func (posts) Posts(_ context.Context, ids []int64) ([]domain.Post, error) {
	out := make([]domain.Post, len(ids))
	for i, id := range ids {
		out[i] = domain.Post{ID: id, AuthorID: 9, Body: "b"}
	}
	return out, nil
}

// follows says every reader follows every author, and hides none.
type follows struct{}

func (follows) Hiding(_ context.Context, readers []int64, _ int64) ([]int, error) {
	return make([]int, len(readers)), nil
}

func (follows) Following(_ context.Context, readers []int64, _ int64) ([]int, error) {
	out := make([]int, len(readers))
	for i := range out {
		out[i] = 1
	}
	return out, nil
}

func TestNewHubChecksItsConfig(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]live.HubConfig{
		"HubConfig.MaxPerUser":     {MaxPerUser: -1},
		"HubConfig.MaxConnections": {MaxConnections: -1},
		"HubConfig.Buffer":         {Buffer: -1},
	} {
		cfg.Posts, cfg.Follows = posts{}, follows{}
		hub, err := live.NewHub(nil, cfg)
		require.ErrorContains(t, err, "live: "+field+" is -1, out of range", field)
		require.Nil(t, hub)
	}
	_, err := live.NewHub(nil, live.HubConfig{})
	require.ErrorContains(t, err, "required")
}

type env struct {
	pub      *live.Publisher
	hub      *live.Hub
	messages func() float64 // newsfeed_live_messages_total
}

func start(t *testing.T, cfg live.HubConfig) *env {
	t.Helper()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	reg := prometheus.NewRegistry()
	pub := live.NewPublisher(rdb, live.PublisherConfig{Prefix: prefix, Registerer: reg})
	cfg.Prefix, cfg.Posts = prefix, posts{}
	if cfg.Follows == nil {
		cfg.Follows = follows{}
	}
	hub, err := live.NewHub(rdb, cfg)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = pub.Run(ctx); done <- struct{}{} }()
	go func() { _ = hub.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { stop(); <-done; <-done })
	e := &env{pub: pub, hub: hub, messages: func() float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "newsfeed_live_messages_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}}
	e.warmUp(t)
	return e
}

// warmUp waits until the publisher hears of a stream as it opens (its
// subscription to the hubs' announcements is up), so that a test's deadlines
// do not include the start.
func (e *env) warmUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const probe = -1 // no reader of a test
	sub, err := e.hub.Subscribe(ctx, probe)
	require.NoError(t, err)
	defer sub.Close()
	require.Eventually(t, func() bool {
		e.pub.Pushed(ctx, 1, 9, []int64{probe})
		select {
		case <-sub.Events():
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}, 15*time.Second, time.Millisecond, "the publisher never heard of a stream")
	for len(sub.Events()) > 0 {
		<-sub.Events()
	}
}

// hiding says each reader in it follows every author and hides them as
// given (1 hides, -1 not known); others follow and hide none.
type hiding map[int64]int

func (hiding) Following(ctx context.Context, readers []int64, author int64) ([]int, error) {
	return follows{}.Following(ctx, readers, author)
}

func (h hiding) Hiding(_ context.Context, readers []int64, _ int64) ([]int, error) {
	out := make([]int, len(readers))
	for i, r := range readers {
		out[i] = h[r]
	}
	return out, nil
}

// A post goes to the streams whose reader's feed does not hide its author,
// checked by the hub for them all (HidesChecked); a stream whose feed is
// not in Redis is told to read it, which rebuilds it; a hiding reader gets
// nothing.
func TestHubChecksWhomReadersHide(t *testing.T) {
	t.Parallel()
	const hider, unknown, reader = 1, 2, 3
	e := start(t, live.HubConfig{Follows: hiding{hider: 1, unknown: -1}})
	ctx := context.Background()
	subs := map[int64]domain.LiveSubscription{}
	for _, u := range []int64{hider, unknown, reader} {
		sub, err := e.hub.Subscribe(ctx, u)
		require.NoError(t, err)
		defer sub.Close()
		subs[u] = sub
	}
	// Each reader's inbox is its own: the publisher may hear of one
	// reader's stream before another's, so the post is pushed again until
	// both streams that get something got it.
	var got map[int64]domain.LiveEvent
	require.Eventually(t, func() bool {
		e.pub.Pushed(ctx, 2, 9, []int64{hider, unknown, reader}) // until the publisher heard of them
		got = map[int64]domain.LiveEvent{}
		wait := time.After(20 * time.Millisecond)
		for len(got) < 2 {
			select {
			case ev := <-subs[reader].Events():
				got[reader] = ev
			case ev := <-subs[unknown].Events():
				got[unknown] = ev
			case <-wait:
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, domain.LiveEvent{Kind: domain.LivePost, Post: domain.Post{ID: 2, AuthorID: 9, Body: "b"}, HidesChecked: true}, got[reader])
	require.Equal(t, domain.LiveCatchUp, got[unknown].Kind)
	select {
	case ev := <-subs[hider].Events():
		t.Fatalf("a reader who hides the author got %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

// A page of readers none of whom is connected sends nothing at all; once
// one connects, the next page reaches their stream, and only theirs.
func TestPublisherSendsOnlyToConnectedReaders(t *testing.T) {
	t.Parallel()
	e := start(t, live.HubConfig{})
	ctx := context.Background()
	readers := make([]int64, 1000)
	for i := range readers {
		readers[i] = int64(i + 1)
	}
	before := e.messages()
	e.pub.Pushed(ctx, 1, 9, readers)
	require.Equal(t, before, e.messages(), "nobody of the page connected: no message")

	sub, err := e.hub.Subscribe(ctx, 500)
	require.NoError(t, err)
	defer sub.Close()
	other, err := e.hub.Subscribe(ctx, 5000) // not in the page
	require.NoError(t, err)
	defer other.Close()
	var ev domain.LiveEvent
	require.Eventually(t, func() bool {
		e.pub.Pushed(ctx, 2, 9, readers) // until the publisher heard of the reader
		select {
		case ev = <-sub.Events():
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, domain.LivePost, ev.Kind)
	require.Equal(t, int64(2), ev.Post.ID)
	select {
	case ev := <-other.Events():
		t.Fatalf("a reader outside the page got %+v", ev)
	default:
	}

	sub.Close()
	other.Close()
	require.Eventually(t, func() bool {
		before := e.messages()
		e.pub.Pushed(ctx, 3, 9, readers)
		return e.messages() == before
	}, 10*time.Second, 10*time.Millisecond, "the reader left: nothing is sent again")
}

// A stream whose reader does not take its events is dropped once it falls
// a buffer behind; the hub never blocks on it.
func TestHubDropsAStreamThatFallsBehind(t *testing.T) {
	t.Parallel()
	e := start(t, live.HubConfig{Buffer: 2})
	ctx := context.Background()
	sub, err := e.hub.Subscribe(ctx, 7)
	require.NoError(t, err)
	defer sub.Close()
	require.Eventually(t, func() bool {
		e.pub.Pushed(ctx, 1, 9, []int64{7})
		select {
		case <-sub.Gone():
			return true
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond)
}

// The per-user limit counts a user's streams in every hub; a closed stream
// frees its place.
func TestHubLimitsStreamsPerUser(t *testing.T) {
	t.Parallel()
	e := start(t, live.HubConfig{MaxPerUser: 1, MaxConnections: 2})
	ctx := context.Background()
	a, err := e.hub.Subscribe(ctx, 1)
	require.NoError(t, err)
	_, err = e.hub.Subscribe(ctx, 1)
	require.ErrorIs(t, err, domain.ErrTooManyStreams)
	b, err := e.hub.Subscribe(ctx, 2)
	require.NoError(t, err)
	_, err = e.hub.Subscribe(ctx, 3)
	require.ErrorIs(t, err, domain.ErrStreamsFull)
	a.Close()
	b.Close()
	c, err := e.hub.Subscribe(ctx, 1)
	require.NoError(t, err, "a closed stream frees its place")
	c.Close()
}

// A stream closed while another of the same reader opens leaves the reader
// known to the publishers: the hub announces each count as it is when sent,
// one at a time, so the older count never lands last. (Publishers read the
// whole presence again every 5 s; the reader must be reached well before.)
func TestPresenceSurvivesACloseBesideAnOpen(t *testing.T) {
	t.Parallel()
	e := start(t, live.HubConfig{MaxPerUser: 100})
	ctx := context.Background()
	const reader = 7
	for round := range 20 {
		old, err := e.hub.Subscribe(ctx, reader)
		require.NoError(t, err)
		opened := make(chan domain.LiveSubscription)
		go func() {
			s, err := e.hub.Subscribe(ctx, reader)
			if err != nil {
				t.Errorf("subscribe: %v", err)
			}
			opened <- s
		}()
		old.Close()
		sub := <-opened
		require.NotNil(t, sub)
		got := false
		deadline := time.Now().Add(3 * time.Second)
		for !got && time.Now().Before(deadline) {
			e.pub.Pushed(ctx, int64(round+1), 9, []int64{reader})
			select {
			case <-sub.Events():
				got = true
			case <-time.After(20 * time.Millisecond):
			}
		}
		require.True(t, got, "round %d: the reader's open stream was forgotten", round)
		sub.Close()
	}
}

// explainsAll says a logged outage explains every failure, as the health
// watch does while Redis is down.
type explainsAll struct{}

func (explainsAll) Explained(context.Context, error) bool { return true }

// A channel that cannot be subscribed for a while is logged once at warn —
// or at debug when a logged outage explains it: the outage is the health
// watch's line, not one more per channel.
func TestLiveChannelOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		outages health.Explainer
		level   zapcore.Level
	}{
		"Unexplained": {nil, zapcore.WarnLevel},
		"Explained":   {explainsAll{}, zapcore.DebugLevel},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Refused at once: no dial retries, no command retries.
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = rdb.Close() })
			core, logs := observer.New(zapcore.DebugLevel)
			hub, err := live.NewHub(rdb, live.HubConfig{Posts: posts{}, Follows: follows{}, Logger: zap.New(core), Outages: tc.outages})
			require.NoError(t, err)
			pub := live.NewPublisher(rdb, live.PublisherConfig{Logger: zap.New(core), Outages: tc.outages})
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{}, 2)
			go func() { _ = pub.Run(ctx); done <- struct{}{} }()
			go func() { _ = hub.Run(ctx); done <- struct{}{} }()
			t.Cleanup(func() { stop(); <-done; <-done })

			const msg = "live channel unavailable; live streams get what they miss from the feed until it is back"
			require.Eventually(t, func() bool { return logs.FilterMessage(msg).Len() == 2 }, 30*time.Second, 10*time.Millisecond,
				"the hub's inbox and the publisher's presence channel")
			for _, e := range logs.FilterMessage(msg).All() {
				require.Equal(t, tc.level, e.Level, "%v", e.ContextMap()["channel"])
			}
			require.Zero(t, logs.FilterLevelExact(zapcore.WarnLevel).Len()-logs.FilterMessage(msg).FilterLevelExact(zapcore.WarnLevel).Len(),
				"nothing else warns")
		})
	}
}

// Run returns only once every goroutine it started has ended, even while
// the Redis client stays open (a Pub/Sub read does not end with its
// context; the client is closed later, if at all). Not parallel: the
// goroutines it compares are its own.
func TestRunLeavesNoGoroutineBehind(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	pub := live.NewPublisher(rdb, live.PublisherConfig{Prefix: prefix})
	hub, err := live.NewHub(rdb, live.HubConfig{Prefix: prefix, Posts: posts{}, Follows: follows{}})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = pub.Run(ctx); done <- struct{}{} }()
	go func() { _ = hub.Run(ctx); done <- struct{}{} }()
	e := &env{pub: pub, hub: hub}
	e.warmUp(t) // both subscriptions are up
	stop()
	<-done
	<-done
	// On a Redis Cluster the client starts goroutines of its own for the
	// nodes it meets (its per-node circuit breakers), which live until the
	// client is closed, after this test: TestMain's check sees them go.
	goleak.VerifyNone(t, before,
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
}
