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
//	everything ← app ← main (the service binary)
//	bench, app ← cmd/newsfeed-bench (the bench's own binary)
//
// The service binary links nothing of the bench's: no plotting, LaTeX, PDF
// or progress-bar module (TestServiceLinksNoBench).
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

	"cmd/newsfeed-bench": {"app", "bench", "fanout", "internal/backoff", "internal/probe"}, // the bench's own binary
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

// benchOnlyModules are the modules the bench links for its plots and
// progress bars, which the service binary must not (issue 22: they made
// bin/newsfeed 55.7 MB).
var benchOnlyModules = []string{
	"gonum.org/v1/plot",
	"codeberg.org/go-latex/latex",
	"codeberg.org/go-pdf/fpdf",
	"codeberg.org/go-fonts/liberation",
	"git.sr.ht/~sbinet/gg",
	"github.com/ajstarks/svgo",
	"github.com/golang/freetype",
	"golang.org/x/image",
	"github.com/schollz/progressbar/v3",
}

// TestServiceLinksNoBench: the packages the service binary (the main
// package at the root, what `make build` builds) links are none of the
// bench's and come from none of benchOnlyModules, which the bench's
// binary does link (so that the list cannot go stale unnoticed).
func TestServiceLinksNoBench(t *testing.T) {
	service := deps(t, ".")
	benchCmd := deps(t, "./cmd/newsfeed-bench")
	for _, pkg := range []string{module + "/bench", module + "/cmd/newsfeed-bench"} {
		if _, ok := service[pkg]; ok {
			t.Errorf("the service binary links %s: only cmd/newsfeed-bench may", pkg)
		}
	}
	linked := func(deps map[string]string, mod string) []string {
		var pkgs []string
		for pkg, m := range deps {
			if m == mod {
				pkgs = append(pkgs, pkg)
			}
		}
		slices.Sort(pkgs)
		return pkgs
	}
	for _, mod := range benchOnlyModules {
		if pkgs := linked(service, mod); len(pkgs) > 0 {
			t.Errorf("the service binary links module %s (%s, %d packages): it is the bench's; keep it in cmd/newsfeed-bench",
				mod, pkgs[0], len(pkgs))
		}
		if len(linked(benchCmd, mod)) == 0 {
			t.Errorf("cmd/newsfeed-bench no longer links %s: take it off benchOnlyModules (or name what replaced it)", mod)
		}
	}
}

// deps maps every package that pkg links (go list -deps) to its module
// ("" for the standard library).
func deps(t *testing.T, pkg string) map[string]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}|{{with .Module}}{{.Path}}{{end}}`, pkg)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, mod, _ := strings.Cut(line, "|")
		m[path] = mod
	}
	return m
}
