package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sseClients are live streams of the home feed (GET /v1/feed/stream) that
// the bench holds open, one per user, each read by a goroutine of its own
// as an EventSource would.
type sseClients struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// closing is set when the bench closes the streams: an end after it is
	// not the server's.
	closing atomic.Bool
	// posts counts the post events read since reset; ended, the streams the
	// server ended (a slow reader dropped, the server stopping).
	posts, ended atomic.Int64
	// record keeps each post event's arrival, by post id, with the post's
	// created_at (the latency measurement).
	record   atomic.Bool
	mu       sync.Mutex
	received map[int64][]time.Time
	created  map[int64]time.Time
}

// streamOpeners is how many streams the bench opens at once.
const streamOpeners = 16

// openStreams opens a stream for each of users and returns once every one
// answered 200 (the hub has them: the server subscribes before it answers),
// or closes them all at the first that did not. It first waits until the
// streams closed before are gone from the hubs: a user's stream closed
// and another opened at the same moment can leave the publishers
// believing they have none (their announcements may cross).
func (r *runner) openStreams(ctx context.Context, users []int64) (*sseClients, error) {
	if err := r.waitNobodyConnected(ctx); err != nil {
		return nil, err
	}
	sctx, s := newSSEClients(ctx)
	client := streamClient()
	next := make(chan int64)
	errs := make(chan error, streamOpeners)
	var openers sync.WaitGroup
	for range streamOpeners {
		openers.Add(1)
		go func() {
			defer openers.Done()
			for u := range next {
				if err := s.open(sctx, client, r.h.APIURL, r.token(u)); err != nil {
					errs <- fmt.Errorf("stream of user %d: %w", u, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, u := range users {
		select {
		case next <- u:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	openers.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func newSSEClients(ctx context.Context) (context.Context, *sseClients) {
	ctx, cancel := context.WithCancel(ctx)
	return ctx, &sseClients{cancel: cancel, received: map[int64][]time.Time{}, created: map[int64]time.Time{}}
}

// streamClient is an HTTP client for streams: one connection each, and no
// Timeout (a response lasts as long as its stream).
func streamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true, DisableCompression: true, ResponseHeaderTimeout: 30 * time.Second,
	}}
}

// open opens one stream and reads it in a goroutine until it ends.
func (s *sseClients) open(ctx context.Context, client *http.Client, apiURL, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/v1/feed/stream", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		_ = resp.Body.Close()
		return fmt.Errorf("GET /v1/feed/stream: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	s.wg.Add(1)
	go s.read(resp.Body)
	return nil
}

// read reads one stream's events until it ends.
func (s *sseClients) read(body io.ReadCloser) {
	defer s.wg.Done()
	defer body.Close()
	br := bufio.NewReaderSize(body, 8<<10)
	var event []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			var rest []byte
			rest, err = br.ReadBytes('\n')
			line = append(slices.Clone(line), rest...)
		}
		if err != nil {
			if !s.closing.Load() {
				s.ended.Add(1)
			}
			return
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0: // the end of an event
			event = event[:0]
		case bytes.HasPrefix(line, []byte("event:")):
			event = append(event[:0], bytes.TrimSpace(line[len("event:"):])...)
		case bytes.HasPrefix(line, []byte("data:")) && string(event) == "post":
			at := time.Now()
			s.posts.Add(1)
			if s.record.Load() {
				s.keep(at, bytes.TrimSpace(line[len("data:"):]))
			}
		}
	}
}

// keep records a post event's arrival.
func (s *sseClients) keep(at time.Time, data []byte) {
	var p struct {
		ID        int64     `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	}
	if json.Unmarshal(data, &p) != nil || p.ID == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received[p.ID] = append(s.received[p.ID], at)
	s.created[p.ID] = p.CreatedAt
}

// reset forgets what was read so far.
func (s *sseClients) reset() {
	if s == nil {
		return
	}
	s.posts.Store(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.received)
	clear(s.created)
}

// waitPosts waits until the streams have read want post events since
// reset, for timeout at most, and no longer than liveQuiet after the last
// one that came; what did not arrive shows in the count.
func (s *sseClients) waitPosts(ctx context.Context, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, lastAt := s.posts.Load(), time.Now()
	for n := last; n < want && time.Now().Before(deadline) && time.Since(lastAt) < liveQuiet; n = s.posts.Load() {
		if n != last {
			last, lastAt = n, time.Now()
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// close ends every stream and waits for their readers.
func (s *sseClients) close() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	s.cancel()
	s.wg.Wait()
}
