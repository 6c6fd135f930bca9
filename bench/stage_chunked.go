package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// chunkedFanout: one post to ChunkFollowers followers, split into chunks
// (fanout.chunk_size), done by one worker process and then by two.
func (r *runner) chunkedFanout(ctx context.Context) error {
	if !r.stopInProcessWorkers() {
		fmt.Fprintln(r.progress, "  skipped: needs worker processes of its own (not with --api)")
		return nil
	}
	var took []time.Duration
	var procs []*Process
	defer func() {
		for _, p := range procs {
			p.Stop()
		}
	}()
	for workers := 1; workers <= 2; workers++ {
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		d, err := r.timeOnePost(ctx, authorWide)
		if err != nil {
			return err
		}
		took = append(took, d)
		fmt.Fprintf(r.progress, "  %d worker process(es): %s\n", workers, d.Round(time.Millisecond))
	}
	r.report.add(Stage{
		Name: "chunked fan-out, 2 workers vs 1", Unit: "s", Ours: took[1].Seconds(), Limit: took[0].Seconds(),
		Ratio: ratio(took[1].Seconds(), took[0].Seconds()), Target: "< 1 where cores allow",
		Note: fmt.Sprintf("one post to %s followers in chunks; limit column: the same with one worker process; %d CPUs shared with PostgreSQL, Redis and the load",
			humanInt(r.opts.ChunkFollowers), runtime.NumCPU()),
	})
	return nil
}
