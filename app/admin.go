package app

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/newsfeed/newsfeed/admin"
)

// withConsole returns ops with the operator console at /admin, and starts
// its sampler in g. The console is off without admin.token, unless --dev
// opens it; the log says which at start.
func (s *System) withConsole(ctx context.Context, g *errgroup.Group, roles []Role, ops http.Handler) (http.Handler, error) {
	console, err := s.newConsole(roles)
	if err != nil {
		return nil, err
	}
	url := "http://" + reachable(s.Config.Metrics.Addr) + admin.Path
	switch console.Mode() {
	case "open":
		s.Log.Warn("operator console open to anybody who reaches metrics.addr: --dev without admin.token", zap.String("url", url))
	case "token":
		s.Log.Info("operator console (admin.token)", zap.String("url", url))
	default:
		s.Log.Info("operator console off: admin.token is not set", zap.String("url", url))
	}
	g.Go(func() error { return console.Run(ctx) })
	mux := http.NewServeMux()
	mux.Handle(admin.Path, console)
	mux.Handle(admin.Path+"/", console)
	mux.Handle("/", ops)
	return mux, nil
}

// reachable writes a listen address as a browser on this host reaches it:
// ":9090" is localhost:9090.
func reachable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// newConsole builds the operator console of this process.
func (s *System) newConsole(roles []Role) (*admin.Console, error) {
	shown := make([]admin.Setting, len(s.Settings))
	for i, st := range s.Settings {
		shown[i] = admin.Setting{Key: st.Key, Value: st.Value, Source: st.Source.String()}
	}
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return admin.New(admin.Config{
		Token:    s.Config.Admin.Token,
		Open:     s.Dev,
		Outbox:   s.Store,
		Queue:    s.Queue,
		Gatherer: s.registry,
		Settings: shown,
		Process:  admin.Process{Roles: names, Version: ReadBuildInfo().String(), StartedAt: time.Now()},
		Logger:   s.Log.Named("admin"),
	})
}
