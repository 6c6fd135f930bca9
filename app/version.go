package app

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// Version and Commit are set when the binary is built by `make build`
// (-ldflags "-X github.com/newsfeed/newsfeed/app.Version=…"): the version is
// `git describe` of the tree. A binary built otherwise is "dev", with the
// commit Go stamped into it, if any.
var (
	Version = ""
	Commit  = ""
)

// BuildInfo is what `newsfeed version` prints: the version, the commit the
// binary was built from ("-dirty" with uncommitted changes) and the Go
// version that built it.
type BuildInfo struct {
	Version, Commit, Go string
}

// ReadBuildInfo reads the version and the commit from the binary.
func ReadBuildInfo() BuildInfo {
	info := BuildInfo{Version: Version, Commit: Commit, Go: runtime.Version()}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit != "" {
		return info
	}
	info.Commit = "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		var revision, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				revision = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
		if revision != "" {
			info.Commit = revision + dirty
		}
	}
	return info
}

func (b BuildInfo) String() string {
	return fmt.Sprintf("newsfeed %s (commit %s, %s)", b.Version, b.Commit, b.Go)
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), ReadBuildInfo())
			return err
		},
	}
}

// buildInfoGauge is newsfeed_build_info{version,commit,goversion}, always
// 1: which build every process runs, on its /metrics.
func buildInfoGauge(b BuildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "newsfeed_build_info",
		Help:        "The build this process runs: its version, commit and Go version in the labels; always 1.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": b.Go},
	})
	g.Set(1)
	return g
}
