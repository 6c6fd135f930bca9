// Package deploy holds the tests of what operators load next to the binary:
// the Grafana dashboard (grafana/newsfeed.json) and the Prometheus alerts
// (prometheus/alerts.yml and their unit tests, alerts_test.yml, which
// `make monitoring-check` runs with promtool).
package deploy

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

const (
	dashboardFile  = "grafana/newsfeed.json"
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
)

// panel is what these tests read of a dashboard panel.
type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []struct {
		Datasource map[string]string `json:"datasource"`
		Expr       string            `json:"expr"`
		RefID      string            `json:"refId"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) (raw []byte, d grafanaDashboard) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &d))
	return raw, d
}

// TestDashboardIsGrafanaJSON: the dashboard is what Grafana's schema (its
// foundation SDK, generated from the schema) accepts, field by field, and
// every query goes to the data source the user picks in its variable.
func TestDashboardIsGrafanaJSON(t *testing.T) {
	t.Parallel()
	raw, d := readDashboard(t)
	plugins.RegisterDefaultPlugins()
	// The SDK prefers its v2 type, Grafana 12's new resource format; the
	// classic JSON model is what Grafana's import and file provisioning
	// read in every version, and what this dashboard is.
	var strict dashboard.Dashboard //nolint:staticcheck // the classic JSON model, on purpose (above)
	require.NoError(t, emptyIsNil(strict.UnmarshalJSONStrict(raw)), "%s against Grafana's dashboard schema", dashboardFile)
	require.NoError(t, emptyIsNil(strict.Validate()), "%s against Grafana's dashboard schema", dashboardFile)

	require.NotEmpty(t, d.UID)
	i := slices.IndexFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query any    `json:"query"`
	}) bool {
		return v.Name == "datasource"
	})
	require.GreaterOrEqual(t, i, 0, "a variable named datasource")
	require.Equal(t, "datasource", d.Templating.List[i].Type)
	require.Equal(t, "prometheus", d.Templating.List[i].Query)

	ids := map[int]bool{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		want := map[string]string{"type": "prometheus", "uid": "${datasource}"}
		require.Equal(t, want, p.Datasource, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, target := range p.Targets {
			require.Equal(t, want, target.Datasource, "panel %q, query %s", p.Title, target.RefID)
			require.NotEmpty(t, strings.TrimSpace(target.Expr), "panel %q, query %s", p.Title, target.RefID)
		}
	}
}

// emptyIsNil undoes a typed nil: the SDK returns its cog.BuildErrors even
// when it holds none.
func emptyIsNil(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

// The dashboard shows what an operator reaches for first.
func TestDashboardShowsTheEssentials(t *testing.T) {
	t.Parallel()
	_, d := readDashboard(t)
	used := strings.Join(dashboardExprs(d), "\n")
	for _, metric := range []string{
		"newsfeed_delivery_seconds_bucket",              // delivery latency quantiles
		"newsfeed_outbox_pending",                       // the backlog
		"newsfeed_outbox_oldest_pending_age_seconds",    // how late delivery is
		"newsfeed_outbox_dead",                          // dead events
		"newsfeed_fanout_entries_total",                 // fan-out rate
		"newsfeed_http_request_duration_seconds_count",  // HTTP rate and errors by route
		"newsfeed_http_request_duration_seconds_bucket", // HTTP latency by route
		"newsfeed_feed_fallback_reads_total",            // Redis fallbacks
		"newsfeed_ratelimit_fail_open_total",            // rate limits failing open
		"newsfeed_queue_pending",                        // tickets not acknowledged
	} {
		require.Contains(t, used, metric+"{", "%s queries %s", dashboardFile, metric)
	}
}

func dashboardExprs(d grafanaDashboard) []string {
	var exprs []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	return exprs
}

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readAlerts(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// Every alert waits before it fires, says how bad it is, what it means, and
// where its runbook is: a section of docs/RUNBOOK.md named after it (app's
// docs tests check that each runbook_url resolves to its heading's anchor).
func TestAlertsHaveRunbooks(t *testing.T) {
	t.Parallel()
	runbook, err := os.ReadFile(filepath.Join("..", "docs", "RUNBOOK.md"))
	require.NoError(t, err)
	for _, r := range readAlerts(t) {
		require.NotEmpty(t, r.Alert, "a rule of %s records instead of alerting", alertsFile)
		require.NotEmpty(t, r.For, "%s fires on a single evaluation: give it a for:", r.Alert)
		require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s description", r.Alert)
		require.Equal(t, "docs/RUNBOOK.md#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"], "%s runbook", r.Alert)
		heading := regexp.MustCompile(`(?m)^## ` + r.Alert + `$`)
		require.True(t, heading.Match(runbook), "docs/RUNBOOK.md has no heading %q, the runbook of %s", r.Alert, r.Alert)
	}
}

// alerts_test.yml makes each alert fire, and shows it silent, in at least
// one case each.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertTestsFile)
	require.NoError(t, err)
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, test := range file.Tests {
		for _, c := range test.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				silent[c.Alertname] = true
			}
		}
	}
	for _, r := range readAlerts(t) {
		require.True(t, fires[r.Alert], "%s never fires in %s", r.Alert, alertTestsFile)
		require.True(t, silent[r.Alert], "%s is never shown silent in %s", r.Alert, alertTestsFile)
	}
}

var metricName = regexp.MustCompile(`\bnewsfeed_[a-z_]+`)

// The dashboard and the alerts query only metrics the processes export: the
// ones docs/API.md lists (app's tests hold that list to the code).
func TestMonitoringQueriesDocumentedMetrics(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "API.md"))
	require.NoError(t, err)
	_, metrics, ok := strings.Cut(string(doc), "\n### Metrics\n")
	require.True(t, ok, "docs/API.md has a Metrics section")
	documented := map[string]bool{}
	for _, name := range metricName.FindAllString(metrics, -1) {
		documented[name] = true
	}

	_, d := readDashboard(t)
	queries := map[string][]string{dashboardFile: dashboardExprs(d)}
	for _, r := range readAlerts(t) {
		queries[alertsFile] = append(queries[alertsFile], r.Expr)
	}
	for file, exprs := range queries {
		for _, expr := range exprs {
			for _, name := range metricName.FindAllString(expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && documented[trimmed] {
						base = trimmed
					}
				}
				require.True(t, documented[base], "%s queries %s, which docs/API.md does not list: %s", file, name, expr)
			}
		}
	}
}

// Every query of the dashboard is PromQL that Prometheus parses: promtool
// checks them as recording rules, Grafana's variables given values.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool := testenv.Promtool(t)
	_, d := readDashboard(t)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$job", "newsfeed-.+")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			rules = append(rules, rule{Record: "dashboard:panel_" + strings.ReplaceAll(p.Title, " ", "_") + ":" + target.RefID, Expr: vars.Replace(target.Expr)})
		}
	}
	for i := range rules {
		rules[i].Record = regexp.MustCompile(`[^a-zA-Z0-9_:]`).ReplaceAllString(rules[i].Record, "_")
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	require.NoError(t, os.WriteFile(file, out, 0o600))
	check, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	require.NoError(t, err, "promtool check rules on the queries of %s:\n%s", dashboardFile, check)
}
