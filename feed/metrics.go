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

// metrics counts what reads filter out.
type metrics struct {
	filteredEntries *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{filteredEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "newsfeed_feed_filtered_entries_total",
		Help: "Entries a home feed holds and a read left out, by reason: hidden (muted or blocked author) or repeat (the original shows through an earlier entry).",
	}, []string{"reason"})}
	for _, r := range []string{reasonHidden, reasonRepeat} {
		m.filteredEntries.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(m.filteredEntries); err != nil {
			// Feeds of one process share the counter (`newsfeed all`).
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					m.filteredEntries = c
				}
			}
		}
	}
	return m
}

func (m *metrics) filtered(reason string, n int) {
	if n > 0 {
		m.filteredEntries.WithLabelValues(reason).Add(float64(n))
	}
}
