package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Process is a child process the bench started and watches: Done is closed
// when it has exited, and Err then says how, with the last lines of its
// stderr. A process the bench stopped itself (Stop) exited without error.
type Process struct {
	name     string
	cmd      *exec.Cmd
	tail     *tailWriter
	done     chan struct{}
	err      error // set before done is closed
	stopping atomic.Bool
}

// stderrLines is how many of a child's last stderr lines its error keeps.
const stderrLines = 8

// StartProcess starts cmd as the process called name ("worker 2"). Its
// stderr goes to stderr (when not nil) and into the small buffer of last
// lines that Err reports; cmd.Stderr must be unset.
func StartProcess(name string, cmd *exec.Cmd, stderr io.Writer) (*Process, error) {
	p := &Process{name: name, cmd: cmd, tail: &tailWriter{max: stderrLines}, done: make(chan struct{})}
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(p.tail, stderr)
	} else {
		cmd.Stderr = p.tail
	}
	// A grandchild that keeps the pipe open must not keep Wait from returning.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		err := cmd.Wait()
		if !p.stopping.Load() {
			p.err = p.exitError(err)
		}
		close(p.done)
	}()
	return p, nil
}

func (p *Process) exitError(waitErr error) error {
	if waitErr == nil {
		waitErr = errors.New("exit status 0")
	}
	return &ExitError{Name: p.name, Pid: p.cmd.Process.Pid, Err: waitErr, Stderr: p.tail.lines()}
}

// ExitError is a child process that exited before the bench stopped it.
type ExitError struct {
	Name   string   // "worker 2"
	Pid    int      // its process id
	Err    error    // how it ended: "exit status 1", "signal: killed"
	Stderr []string // the last lines of its stderr
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s (pid %d) exited: %v", e.Name, e.Pid, e.Err)
	if len(e.Stderr) == 0 {
		return msg + " (nothing on its stderr)"
	}
	return msg + "; its stderr ended with:\n\t" + strings.Join(e.Stderr, "\n\t")
}

func (e *ExitError) Unwrap() error { return e.Err }

// Name is the name given to StartProcess.
func (p *Process) Name() string { return p.name }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is why the process exited, once Done is closed: nil if Stop ended it.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop kills the process, unless it has already exited, and waits for it.
func (p *Process) Stop() {
	p.stopping.Store(true)
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tailWriter keeps the last max lines written to it (each cut to a few
// hundred bytes), for the error of a child process that died.
type tailWriter struct {
	mu      sync.Mutex
	max     int
	ring    []string
	next    int // where the next full line goes once ring is full
	partial []byte
}

const maxLine = 512

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.partial = appendCut(w.partial, b)
			break
		}
		w.push(string(appendCut(w.partial, b[:i])))
		w.partial = w.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

func appendCut(dst, b []byte) []byte {
	if room := maxLine - len(dst); len(b) > room {
		b = b[:max(room, 0)]
	}
	return append(dst, b...)
}

func (w *tailWriter) push(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	if len(w.ring) < w.max {
		w.ring = append(w.ring, line)
		return
	}
	w.ring[w.next] = line
	w.next = (w.next + 1) % w.max
}

// lines are the kept lines, oldest first, with an unfinished last line.
func (w *tailWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.ring)+1)
	out = append(out, w.ring[w.next:]...)
	out = append(out, w.ring[:w.next]...)
	if strings.TrimSpace(string(w.partial)) != "" {
		out = append(out, string(w.partial))
		if len(out) > w.max {
			out = out[1:]
		}
	}
	return out
}

// lockedWriter serialises writes from the stages and from the copies of the
// children's stderr to the one progress writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
