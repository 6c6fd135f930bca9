package live

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/health"
)

// goListen runs listen in a goroutine of its own, and returns a function
// that waits until that goroutine has ended (it ends once ctx has): Run
// calls it before returning, so that nothing it started outlives it.
func goListen(ctx context.Context, rdb redis.UniversalClient, channel string, log *zap.Logger, outages health.Explainer,
	subscribed func(again bool), message func(payload string)) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		listen(ctx, rdb, channel, log, outages, subscribed, message)
	}()
	return func() { <-done }
}

// listen keeps a subscription to one shard channel until ctx ends: it calls
// subscribed each time the subscription (re)starts — after the first time,
// messages may have been lost in between, since Pub/Sub keeps nothing — and
// message for each message. A subscription that breaks (the node died, the
// slot moved: Redis then unsubscribes its clients) is made again, after a
// growing wait while Redis does not answer. An interruption that lasts is
// logged, and its end, at warn and info, or at debug while an outage that
// outages (which may be nil) has logged explains it: an outage of Redis is
// the watch's two lines, not two more per channel. It returns once ctx has
// ended.
func listen(ctx context.Context, rdb redis.UniversalClient, channel string, log *zap.Logger, outages health.Explainer,
	subscribed func(again bool), message func(payload string)) {
	wait := backoff.Doubling{Max: 2e9}
	again, failures, warned := false, 0, false
	for ctx.Err() == nil {
		ps := rdb.SSubscribe(ctx, channel)
		// A Pub/Sub read ends with its connection, not with its context:
		// close the subscription when ctx ends, or receive waits for the
		// next message (or for the client to close) however long that is.
		unhook := context.AfterFunc(ctx, func() { _ = ps.Close() })
		err := receive(ctx, ps, func() {
			wait.Reset()
			if failures >= warnAfter {
				level := zapcore.DebugLevel
				if warned {
					level = zapcore.InfoLevel
				}
				log.Log(level, "live channel subscribed again", zap.String("channel", channel))
			}
			failures, warned = 0, false
			subscribed(again)
			again = true
		}, message)
		unhook()
		_ = ps.Close()
		if ctx.Err() != nil {
			return
		}
		failures++
		if failures == warnAfter { // once an interruption: live events wait, the feeds do not
			warned = outages == nil || !outages.Explained(ctx, err)
			level := zapcore.DebugLevel
			if warned {
				level = zapcore.WarnLevel
			}
			log.Log(level, "live channel unavailable; live streams get what they miss from the feed until it is back",
				zap.String("channel", channel), zap.Error(err))
		} else {
			log.Debug("live channel interrupted; subscribing again", zap.String("channel", channel), zap.Error(err))
		}
		backoff.Sleep(ctx, wait.Next())
	}
}

// warnAfter is the failed subscriptions in a row that are logged as an
// outage (one interruption — a failover, a slot moved — is not).
const warnAfter = 5

// errUnsubscribed: Redis ended the subscription (its slot moved).
var errUnsubscribed = errors.New("unsubscribed by the server")

// quietFor is how long a subscription hears nothing before it pings Redis;
// a ping unanswered as long again means the connection is dead (a silent
// Redis: no reset, no answer), and the subscription is made again. A silent
// partition then costs live events at most 2 × quietFor, not until the
// connection breaks by itself.
const quietFor = 2 * time.Second

// errNoPong: a ping on the subscription went unanswered.
var errNoPong = errors.New("no answer to a ping on the subscription")

// receive reads one subscription until it breaks, or goes silent.
func receive(ctx context.Context, ps *redis.PubSub, subscribed func(), message func(string)) error {
	pinged := false
	for {
		m, err := ps.ReceiveTimeout(ctx, quietFor)
		if isTimeout(err) && ctx.Err() == nil {
			if pinged {
				return errNoPong
			}
			if err := ps.Ping(ctx); err != nil {
				return err
			}
			pinged = true
			continue
		}
		if err != nil {
			return err
		}
		pinged = false
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe", "subscribe":
				subscribed()
			case "sunsubscribe", "unsubscribe":
				return errUnsubscribed
			}
		case *redis.Message:
			message(m.Payload)
		}
	}
}

// isTimeout reports whether err is a read that timed out (the connection
// is still good: go-redis keeps it after ReceiveTimeout).
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
