package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// deliveryLatency: post committed → fan-out finished, both on the database
// clock, under a fixed arrival rate (open loop: a late post does not delay
// the next one).
func (r *runner) deliveryLatency(ctx context.Context) error {
	classes := []struct {
		author    int64
		followers int
		rate      int
	}{{author100, 100, 100}, {author1k, 1000, 100}, {author10k, 10_000, 10}}
	for _, c := range classes {
		after, err := r.lastOutboxID(ctx)
		if err != nil {
			return err
		}
		interval := time.Second / time.Duration(c.rate)
		tick := time.NewTicker(interval)
		deadline := time.Now().Add(r.opts.LatencyTime)
		var wg sync.WaitGroup
		var postErr atomic.Value
		sent := 0
		for time.Now().Before(deadline) {
			<-tick.C
			wg.Add(1)
			sent++
			go func() {
				defer wg.Done()
				if err := r.post(ctx, c.author); err != nil {
					postErr.Store(err)
				}
			}()
		}
		tick.Stop()
		wg.Wait()
		if err, _ := postErr.Load().(error); err != nil {
			return err
		}
		if err := r.drain(ctx, 5*time.Minute); err != nil {
			return err
		}
		rows, err := r.pool.Query(ctx, `SELECT extract(epoch FROM finished_at - created_at)::float8 FROM outbox
			WHERE id > $1 AND event_type = 'post.created' AND status = 'done'`, after)
		if err != nil {
			return err
		}
		var lat []time.Duration
		for rows.Next() {
			var s float64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			lat = append(lat, time.Duration(s*float64(time.Second)))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		raw, err := r.rawOnePost(ctx, c.followers)
		if err != nil {
			return err
		}
		p := percentiles(lat)
		target := ""
		if c.followers == 1000 {
			target = "p99 ≤ 250 ms"
		}
		name := fmt.Sprintf("delivery, %s followers at %d posts/s", humanInt(c.followers), c.rate)
		r.report.add(Stage{
			Name: name, Unit: "ms (p50)", Ours: p.P50, Limit: float64(raw) / float64(time.Millisecond),
			Ratio: ratio(p.P50, float64(raw)/float64(time.Millisecond)), Target: target, Latency: p,
			Note: fmt.Sprintf("%d posts in %s, open loop; limit: raw ZADD of one post's entries", sent, r.opts.LatencyTime),
		})
		r.report.LatencySamples[name] = msSamples(lat)
		fmt.Fprintf(r.progress, "  %s: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d posts)\n", name, p.P50, p.P95, p.P99, len(lat))
	}
	return nil
}
