package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTailWriterKeepsLastLines(t *testing.T) {
	w := &tailWriter{max: 3}
	for i := range 10 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	_, _ = w.Write([]byte("\n\npart"))
	_, _ = w.Write([]byte("ial"))
	require.Equal(t, []string{"line 8", "line 9", "partial"}, w.lines())
	_, _ = w.Write([]byte(" end\n" + strings.Repeat("x", 2000) + "\n"))
	lines := w.lines()
	require.Equal(t, []string{"line 9", "partial end", strings.Repeat("x", maxLine)}, lines)
}

// TestWorkerDeathEndsStage: a stage waiting for work that only its worker
// process would do ends when that process exits, with the process's error,
// not at the test's deadline.
func TestWorkerDeathEndsStage(t *testing.T) {
	r := &runner{progress: &lockedWriter{w: io.Discard}, h: Harness{WorkerCommand: func() (*exec.Cmd, error) {
		return exec.Command("sh", "-c", "echo one >&2; sleep 0.2; echo 'config file config.yaml: no such file or directory' >&2; exit 3"), nil
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := runStage(ctx, func(ctx context.Context) error {
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		defer p.Stop()
		<-ctx.Done() // a fan-out nobody does
		return ctx.Err()
	})
	require.NoError(t, ctx.Err(), "the stage waited for the deadline")
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, "worker 1", exit.Name)
	require.Equal(t, []string{"one", "config file config.yaml: no such file or directory"}, exit.Stderr)
	var status *exec.ExitError
	require.ErrorAs(t, err, &status)
	require.Equal(t, 3, status.ExitCode())
	require.Contains(t, err.Error(), "worker 1 (pid ")
	require.Contains(t, err.Error(), "exited: exit status 3")
}

// TestStoppedWorkerIsNoError: the worker a stage stops when it is done does
// not fail the stage, and a stage's own error stays its own.
func TestStoppedWorkerIsNoError(t *testing.T) {
	r := &runner{progress: &lockedWriter{w: io.Discard}, h: Harness{WorkerCommand: func() (*exec.Cmd, error) {
		return exec.Command("sleep", "600"), nil
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mine := errors.New("the stage's own")
	for _, want := range []error{nil, mine} {
		err := runStage(ctx, func(ctx context.Context) error {
			p, err := r.startWorker(ctx)
			if err != nil {
				return err
			}
			p.Stop()
			require.NoError(t, p.Err())
			return want
		})
		require.Equal(t, want, err)
	}
}
