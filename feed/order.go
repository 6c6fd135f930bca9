package feed

import (
	"container/heap"
	"context"
	"sync"
)

// pushOrder lets a process's pushes reach Redis oldest post first, a few
// at a time. A feed takes the newest post with one APPEND, but a post older
// than its newest entry is written in place, which costs a few times more
// (see pushScript) — and with dozens of fan-outs side by side, finishing
// their PostgreSQL reads in any order, almost every push would be one.
// Redis runs scripts one at a time anyway, so holding a push back until
// the older ones waiting have gone costs no throughput: it only reorders
// work that would queue in Redis. Only the script calls are ordered; the
// wait for replicas that follows is not.
type pushOrder struct {
	mu      sync.Mutex
	free    int // pushes that may start now
	waiting waiters
}

func newPushOrder(slots int) *pushOrder { return &pushOrder{free: slots} }

// waiter is one push held back, woken by closing ready.
type waiter struct {
	postID int64
	ready  chan struct{}
	gone   bool // its caller gave up
}

// acquire waits until the push of postID may start: a slot is free and no
// push of an older post waits.
func (o *pushOrder) acquire(ctx context.Context, postID int64) error {
	o.mu.Lock()
	if o.free > 0 && len(o.waiting) == 0 {
		o.free--
		o.mu.Unlock()
		return nil
	}
	w := &waiter{postID: postID, ready: make(chan struct{})}
	heap.Push(&o.waiting, w)
	o.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		o.mu.Lock()
		defer o.mu.Unlock()
		select {
		case <-w.ready: // woken meanwhile: pass the slot on
			o.handOn()
		default:
			w.gone = true
		}
		return ctx.Err()
	}
}

// release frees the slot of a push that ended.
func (o *pushOrder) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handOn()
}

// handOn gives a freed slot to the oldest post waiting, or keeps it.
func (o *pushOrder) handOn() {
	for len(o.waiting) > 0 {
		w := heap.Pop(&o.waiting).(*waiter)
		if !w.gone {
			close(w.ready)
			return
		}
	}
	o.free++
}

// waiters is a min-heap by post id.
type waiters []*waiter

func (h waiters) Len() int           { return len(h) }
func (h waiters) Less(i, j int) bool { return h[i].postID < h[j].postID }
func (h waiters) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiters) Push(x any)        { *h = append(*h, x.(*waiter)) }
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
