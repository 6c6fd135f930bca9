package app

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/newsfeed/newsfeed/admin"
)

// devBanner is what a process started with --dev prints once every listener
// is bound: where to point a browser and how to get a token for curl. A
// person at a terminal would otherwise dig the addresses out of the log.
// devSecret says whether tokens are signed with the public development
// secret (auth.secret unset), which `token` then needs --dev to use too.
func devBanner(cfg *Config, roles []Role, devSecret bool) string {
	servesAPI := slices.Contains(roles, RoleServe)
	var b strings.Builder
	b.WriteString("\nnewsfeed is running in development mode (--dev); Ctrl-C stops it.\n")
	if servesAPI {
		fmt.Fprintf(&b, "  web app:           http://%s/  (sign in with any user id)\n", reachable(cfg.HTTP.Addr))
	}
	// The console's conditions are opsRole's.
	switch {
	case cfg.Metrics.Addr == "":
		b.WriteString("  operator console:  off (metrics.addr is empty)\n")
	case servesAPI && cfg.Metrics.Addr == cfg.HTTP.Addr:
		b.WriteString("  operator console:  off (metrics.addr is the API's address)\n")
	default:
		access := "open without a token"
		if cfg.Admin.Token != "" {
			access = "paste admin.token"
		}
		fmt.Fprintf(&b, "  operator console:  http://%s%s  (%s)\n", reachable(cfg.Metrics.Addr), admin.Path, access)
	}
	if servesAPI {
		dev := ""
		if devSecret {
			dev = " --dev"
		}
		fmt.Fprintf(&b, "  a token for curl:  %s token%s --user 1\n", programName(), dev)
	}
	return b.String() + "\n"
}

// programName is how the user ran this binary ("bin/newsfeed" under make
// run), for commands they can paste; "newsfeed" when it was run otherwise
// (a test binary).
func programName() string {
	if filepath.Base(os.Args[0]) == "newsfeed" {
		return os.Args[0]
	}
	return "newsfeed"
}
