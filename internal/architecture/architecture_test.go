// Package architecture holds the test that keeps the import graph pointing
// one way: the shared vocabulary (domain) at the bottom, the adapters to
// PostgreSQL and Redis above it, the services that use them through their own
// interfaces above those, and app, which alone wires concrete types together.
//
//	domain ← store, feed, queue, ratelimit, sticky (adapters)
//	domain ← outbox, fanout, api (services; they import no adapter)
//	domain ← admin (the operator console; it reads the store and the queue
//	through interfaces of its own, as the services do)
//	web (the web app's files; app gives them to api)
//	internal/static ← admin, web (how both pages' embedded files are sent)
//	everything ← app, bench ← main
package architecture

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/newsfeed/newsfeed"

// allowed lists, for every package of the module, the packages of the module
// its non-test code may import. A package missing here fails the test: say
// where a new package sits before it is used.
var allowed = map[string][]string{
	"domain":                {},
	"docs":                  {},
	"internal/backoff":      {},
	"internal/defaults":     {}, // the components' Config checks: zero takes the default, negative is refused
	"internal/probe":        {},
	"internal/replicas":     {"domain"},
	"internal/traceparent":  {},
	"internal/health":       {},
	"internal/logctx":       {},
	"internal/routing":      {}, // the API's one rule over echo's router, shared with openapitest
	"internal/failpoint":    {}, // the points where tests stall the product
	"ratelimit":             {},
	"live":                  {"domain", "internal/backoff", "internal/defaults", "internal/health"}, // live streams' presence and messages, over Redis
	"sticky":                {},
	"store":                 {"domain", "internal/backoff", "internal/traceparent"},
	"feed":                  {"domain", "internal/defaults", "internal/failpoint", "internal/logctx", "internal/replicas"},
	"queue":                 {"domain", "internal/defaults", "internal/replicas"},
	"outbox":                {"domain", "internal/backoff", "internal/defaults", "internal/health", "internal/traceparent"},
	"fanout":                {"domain", "internal/backoff", "internal/defaults", "internal/failpoint", "internal/health", "internal/traceparent"},
	"api":                   {"domain", "docs", "internal/defaults", "internal/failpoint", "internal/health", "internal/logctx", "internal/routing"},
	"admin":                 {"domain", "internal/defaults", "internal/static"}, // the operator console; app hands it the store and the queue
	"web":                   {"internal/static"},                                // the web app's files; app hands them to api
	"internal/static":       {},                                                 // sending the embedded files of web and admin
	"internal/testenv":      {"store"},
	"internal/browser":      {}, // headless Chromium for tests
	"bench":                 {"domain", "api", "feed", "store", "queue", "outbox", "fanout", "ratelimit", "internal/backoff", "internal/probe"},
	"app":                   {"*"},
	"":                      {"app"}, // main
	"e2e":                   {},      // tests only
	"deploy":                {},      // tests only: the dashboard and alerts
	"internal/architecture": {},
	"internal/openapitest":  {"docs", "internal/routing"}, // tests' check of the API against docs/openapi.yaml
}

func TestImportsPointOneWay(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports ","}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, "|")
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		may, known := allowed[pkg]
		if !known {
			t.Errorf("package %q has no place in the architecture: add it to allowed in %s", pkg, file)
			continue
		}
		if slices.Contains(may, "*") {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, against the direction of the graph (it may import %v)", orMain(pkg), orMain(dep), may)
			}
		}
	}
}

func orMain(pkg string) string {
	if pkg == "" {
		return "main"
	}
	return pkg
}
