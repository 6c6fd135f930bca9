package admin

import (
	"net/http"
	"time"
)

// Overview is the page's header: the process, and how the console is reached.
type Overview struct {
	Roles     []string  `json:"roles"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	// Open is true when the console needs no token (--dev without
	// admin.token).
	Open bool `json:"open"`
	// SampleEverySeconds is how often the charts get a point.
	SampleEverySeconds float64 `json:"sample_every_seconds"`
}

func (c *Console) overview(w http.ResponseWriter, _ *http.Request) {
	p := c.cfg.Process
	roles := p.Roles
	if roles == nil {
		roles = []string{}
	}
	writeJSON(w, http.StatusOK, Overview{Roles: roles, Version: p.Version, StartedAt: p.StartedAt.UTC(),
		Open: c.Mode() == "open", SampleEverySeconds: c.cfg.SampleEvery.Seconds()})
}

// Settings is the configuration panel.
type Settings struct {
	Settings []Setting `json:"settings"`
}

func (c *Console) settings(w http.ResponseWriter, _ *http.Request) {
	settings := c.cfg.Settings
	if settings == nil {
		settings = []Setting{}
	}
	writeJSON(w, http.StatusOK, Settings{Settings: settings})
}
