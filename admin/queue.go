package admin

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/newsfeed/newsfeed/domain"
)

// QueuePanel is the ticket streams' panel: every partition, and the sums.
type QueuePanel struct {
	// Pending sums the tickets delivered and not acknowledged.
	Pending int64 `json:"pending"`
	// Length sums the streams' entries.
	Length     int64       `json:"length"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition's stream and its consumer group's pending list.
type Partition struct {
	Partition int    `json:"partition"`
	Stream    string `json:"stream"`
	// Length counts the stream's entries: waiting or pending.
	Length int64 `json:"length"`
	// Pending counts the tickets delivered and not acknowledged.
	Pending int64 `json:"pending"`
	// OldestPendingID is the oldest pending ticket's stream entry id,
	// and OldestPendingAgeSeconds how long ago it was published (by the
	// id's milliseconds); both null when nothing is pending.
	OldestPendingID         *string  `json:"oldest_pending_id"`
	OldestPendingAgeSeconds *float64 `json:"oldest_pending_age_seconds"`
	// Consumers hold the pending tickets, by name.
	Consumers []Consumer `json:"consumers"`
	// DeadLetters counts the tickets dead-lettered from it.
	DeadLetters int64 `json:"dead_letters"`
	// GroupExists is false while the consumer group does not exist on the
	// stream: no worker has read it yet, or Redis lost it.
	GroupExists bool `json:"group_exists"`
}

// Consumer is one consumer's share of a partition's pending list.
type Consumer struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
}

func (c *Console) queuePartitions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.dependencyContext(r)
	defer cancel()
	parts, err := c.cfg.Queue.Inspect(ctx)
	if err != nil {
		unavailable(w, "Redis", err)
		return
	}
	writeJSON(w, http.StatusOK, newQueuePanel(parts, time.Now()))
}

func newQueuePanel(parts []domain.QueuePartition, now time.Time) QueuePanel {
	out := QueuePanel{Partitions: make([]Partition, 0, len(parts))}
	for _, p := range parts {
		v := Partition{Partition: p.Partition, Stream: p.Stream, Length: p.Length, Pending: p.Pending,
			Consumers: make([]Consumer, 0, len(p.Consumers)), DeadLetters: p.DeadLetters, GroupExists: !p.NoGroup}
		if p.OldestPendingID != "" {
			id := p.OldestPendingID
			v.OldestPendingID = &id
			if at, ok := entryTime(id); ok {
				age := max(now.Sub(at), 0).Seconds()
				v.OldestPendingAgeSeconds = &age
			}
		}
		for _, c := range p.Consumers {
			v.Consumers = append(v.Consumers, Consumer(c))
		}
		out.Pending += p.Pending
		out.Length += p.Length
		out.Partitions = append(out.Partitions, v)
	}
	return out
}

// entryTime reads when a stream entry was added from its id
// ("<milliseconds>-<sequence>", Redis's clock).
func entryTime(id string) (time.Time, bool) {
	ms, _, ok := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}
