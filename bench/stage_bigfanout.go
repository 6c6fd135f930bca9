package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// bigFanout: one post to BigFollowers followers, post committed → fan-out
// finished, against raw pipelined ZADD of as many entries; and the peak
// memory of the worker process that did it.
func (r *runner) bigFanout(ctx context.Context) error {
	var proc *Process
	if r.stopInProcessWorkers() {
		var err error
		if proc, err = r.startWorker(ctx); err != nil {
			return err
		}
		defer proc.Stop()
	}
	fmt.Fprintf(r.progress, "  one post to %s followers…\n", humanInt(r.opts.BigFollowers))
	var cpu float64
	if proc != nil {
		cpu = pidCPU(proc.Pid())
	}
	took, err := r.timeOnePost(ctx, authorBig)
	if err != nil {
		return err
	}
	if proc != nil {
		cpu = pidCPU(proc.Pid()) - cpu
	}
	var peakRSS float64
	if proc != nil {
		peakRSS = vmHWM(proc.Pid())
	}
	raw, err := r.rawOnePost(ctx, r.opts.BigFollowers)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("one post to %s followers; limit: raw ZADD of as many entries, pipelines of %d",
		humanInt(r.opts.BigFollowers), r.opts.PageSize)
	if peakRSS > 0 {
		note += fmt.Sprintf("; worker peak RSS %.0f MB", peakRSS)
		r.report.WorkerPeakRSSMB = peakRSS
	}
	if cpu > 0 {
		r.report.WorkerCPUPerEntry = cpu * 1e6 / float64(r.opts.BigFollowers)
		note += fmt.Sprintf("; worker CPU %.2f µs per entry", r.report.WorkerCPUPerEntry)
	}
	r.report.add(Stage{
		Name: "big fan-out", Unit: "s", Ours: took.Seconds(), Limit: raw.Seconds(), Ratio: ratio(took.Seconds(), raw.Seconds()),
		Target: "≤ 1.5× (time)", Note: note,
	})
	return nil
}

// vmHWM is the peak resident set of a process in MB, from /proc.
func vmHWM(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
