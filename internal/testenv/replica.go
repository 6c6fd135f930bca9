package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// HoldReplicas gives the test the replicas of the local test cluster to
// itself until it ends: a test that waits for replicas, or stops one, takes
// it first, so that another package's test cannot stop a replica under it.
//
// `scripts/cluster.sh down` removes the lock file when no test holds it: a
// test that waited on the removed file would hold a lock nobody else sees,
// so it opens the path again until the file it locked is the one there.
func HoldReplicas(t testing.TB) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "newsfeed-test-replicas.lock")
	for range 20 {
		lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // a fixed name in the temporary directory
		if err != nil {
			t.Fatalf("replica lock: %v", err)
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatalf("replica lock: %v", err)
		}
		held, err1 := lock.Stat()
		there, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, there) {
			t.Cleanup(func() { _ = lock.Close() }) // releases the lock
			return
		}
		_ = lock.Close() // removed while we waited: take the new one
	}
	t.Fatalf("replica lock: %s keeps being removed", path)
}

// StopReplicaOf stops (SIGSTOP: alive, silent) the first replica of a
// primary of the local test cluster, and returns the function that lets it
// go on (SIGCONT), which the test's cleanup also calls. The replica must
// be a process of this machine, and the test must HoldReplicas.
func StopReplicaOf(t testing.TB, primary *redis.Client) (resume func()) {
	t.Helper()
	pid := replicaPID(t, primary)
	// Should this test binary die before its cleanup (a -timeout, a kill),
	// a process of its own lets the replica go on: a stopped node would
	// hold the shared cluster and every later run.
	guard := exec.CommandContext(context.Background(), "sh", "-c", "sleep "+strconv.Itoa(replicaStopLimit)+"; kill -CONT "+strconv.Itoa(pid)) //nolint:gosec // two integers of ours; never cancelled: it must outlive the test
	guard.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := guard.Start(); err != nil {
		t.Fatalf("start the replica's guard: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the replica (pid %d): %v", pid, err)
	}
	done := false
	resume = func() {
		if done {
			return
		}
		done = true
		_ = guard.Process.Kill() // its sleep goes on, but nothing after it runs
		_, _ = guard.Process.Wait()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Errorf("resume the replica (pid %d): %v", pid, err)
		}
	}
	t.Cleanup(resume)
	return resume
}

// replicaStopLimit is how many seconds a replica stays stopped at most.
const replicaStopLimit = 20

// replicaPID returns the process id of primary's first replica.
func replicaPID(t testing.TB, primary *redis.Client) int {
	t.Helper()
	ctx := context.Background()
	info, err := primary.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication of %s: %v", primary.Options().Addr, err)
	}
	var addr string
	for _, line := range strings.Split(info, "\n") { // slave0:ip=127.0.0.1,port=7004,state=online,...
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "slave0:"); ok {
			fields := map[string]string{}
			for _, kv := range strings.Split(v, ",") {
				k, val, _ := strings.Cut(kv, "=")
				fields[k] = val
			}
			addr = fields["ip"] + ":" + fields["port"]
		}
	}
	if addr == "" {
		t.Fatalf("primary %s has no replica:\n%s", primary.Options().Addr, info)
	}
	return RedisPID(t, addr)
}

// RedisPID returns the process id of the redis-server at addr, a process
// of this machine.
func RedisPID(t testing.TB, addr string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	server, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server of %s: %v", addr, err)
	}
	for _, line := range strings.Split(server, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("process_id of %s: %v", addr, err)
			}
			return pid
		}
	}
	t.Fatalf("no process_id in INFO server of %s", addr)
	return 0
}
