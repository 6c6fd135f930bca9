package feed

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The reasons a read leaves out an entry its feed holds.
const (
	reasonHidden = "hidden" // its author, or its original's, is muted or blocked
	reasonRepeat = "repeat" // its original shows through an earlier entry
)

// metrics counts what reads filter out, and the pushes run again feed by
// feed on a Redis Cluster.
type metrics struct {
	filteredEntries *prometheus.CounterVec
	pushReruns      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{filteredEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "newsfeed_feed_filtered_entries_total",
		Help: "Entries a home feed holds and a read left out, by reason: hidden (muted or blocked author) or repeat (the original shows through an earlier entry).",
	}, []string{"reason"}), pushReruns: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "newsfeed_feed_push_reruns_total",
		Help: "Pages of a fan-out to a Redis Cluster run again one script call per feed, after a primary refused the call on its feeds (a slot moved, a failover).",
	})}
	for _, r := range []string{reasonHidden, reasonRepeat} {
		m.filteredEntries.WithLabelValues(r)
	}
	m.filteredEntries = register(reg, m.filteredEntries)
	m.pushReruns = register(reg, m.pushReruns)
	return m
}

// register registers c with reg (when there is one) and returns it, or the
// collector registered already under its name: the Feeds of one process
// share their counters (`newsfeed all`).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

func (m *metrics) filtered(reason string, n int) {
	if n > 0 {
		m.filteredEntries.WithLabelValues(reason).Add(float64(n))
	}
}
