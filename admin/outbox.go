package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
)

// OutboxCounts is the outbox panel: the rows by state, and the backlog.
type OutboxCounts struct {
	// Pending rows wait to be published (retries in backoff included).
	Pending int64 `json:"pending"`
	// InFlight rows are claimed or published, and not finished.
	InFlight int64 `json:"in_flight"`
	// Dead rows gave up; they wait for an operator.
	Dead int64 `json:"dead"`
	// OldestPendingAgeSeconds is the age of the oldest row neither
	// finished nor dead: how late delivery is.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// DeadEvent is a dead outbox event as operators see it, in the console and
// in `newsfeed outbox dead --json`.
type DeadEvent struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
	// Aggregate is what the event is about (a post, or the follower whose
	// follows changed); null when its payload names none.
	Aggregate *domain.Aggregate `json:"aggregate"`
	// Attempts counts its publications, Failures the failed ones.
	Attempts  int       `json:"attempts"`
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	// DiedAt is null for a row parked before the schema recorded it.
	DiedAt  *time.Time      `json:"died_at"`
	Payload json.RawMessage `json:"payload"`
}

// DeadEvents is a page of dead events, the last to die first, and how many
// are dead in all.
type DeadEvents struct {
	Total  int64       `json:"total"`
	Events []DeadEvent `json:"events"`
}

// NewDeadEvents shows events, out of total.
func NewDeadEvents(events []domain.DeadEvent, total int64) DeadEvents {
	out := DeadEvents{Total: total, Events: make([]DeadEvent, 0, len(events))}
	for _, e := range events {
		d := DeadEvent{ID: e.ID, Type: e.Type, Attempts: e.Attempt, Failures: e.Failures,
			LastError: e.LastError, CreatedAt: e.CreatedAt.UTC(), Payload: e.Payload}
		if a, ok := e.Aggregate(); ok {
			d.Aggregate = &a
		}
		if !e.DiedAt.IsZero() {
			died := e.DiedAt.UTC()
			d.DiedAt = &died
		}
		out.Events = append(out.Events, d)
	}
	return out
}

// Limits of GET /admin/api/outbox/dead?limit=N.
const (
	defaultDeadLimit = 50
	maxDeadLimit     = 500
)

func (c *Console) outboxCounts(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.dependencyContext(r)
	defer cancel()
	s, err := c.cfg.Outbox.OutboxStats(ctx)
	if err != nil {
		unavailable(w, "PostgreSQL", err)
		return
	}
	writeJSON(w, http.StatusOK, OutboxCounts{Pending: s.Pending, InFlight: s.InFlight, Dead: s.Dead,
		OldestPendingAgeSeconds: s.OldestPendingAge.Seconds()})
}

func (c *Console) deadEvents(w http.ResponseWriter, r *http.Request) {
	limit := defaultDeadLimit
	if raw := r.URL.Query().Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxDeadLimit {
			writeError(w, http.StatusBadRequest, "invalid_argument",
				fmt.Sprintf("limit must be a whole number from 1 to %d, got %q", maxDeadLimit, raw))
			return
		}
		limit = n
	}
	ctx, cancel := c.dependencyContext(r)
	defer cancel()
	events, total, err := c.cfg.Outbox.DeadEvents(ctx, limit)
	if err != nil {
		unavailable(w, "PostgreSQL", err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeadEvents(events, total))
}

// RetryResult is the answer to a retry: the event is pending again.
type RetryResult struct {
	ID     int64  `json:"id"`
	Status string `json:"status"`
}

// retryDead is `newsfeed outbox retry-dead --id N`: the same operation,
// with the same answers when the event is not dead.
func (c *Console) retryDead(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != raw {
		writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("the event id must be a positive integer, got %q", raw))
		return
	}
	ctx, cancel := c.dependencyContext(r)
	defer cancel()
	err = c.cfg.Outbox.RetryDeadEvent(ctx, id)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found",
			fmt.Sprintf("no outbox event %d (finished events are deleted after outbox.retention)", id))
		return
	case errors.Is(err, domain.ErrNotDead):
		writeError(w, http.StatusConflict, "not_dead", err.Error())
		return
	case err != nil:
		unavailable(w, "PostgreSQL", err)
		return
	}
	c.log.Info("dead outbox event retried from the operator console", zap.Int64("id", id), zap.String("remote", r.RemoteAddr))
	writeJSON(w, http.StatusOK, RetryResult{ID: id, Status: "pending"})
}

// dependencyContext bounds one read of a dependency.
func (c *Console) dependencyContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.cfg.DependencyTimeout)
}
