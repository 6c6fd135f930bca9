package app

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// readAPIDoc returns docs/API.md, the project's reference of its commands,
// configuration, HTTP API, guarantees and metrics.
func readAPIDoc(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "API.md"))
	require.NoError(t, err)
	return string(raw)
}

// TestDocsNameEveryConfigKey: docs/API.md names every configuration key and
// its environment variable.
func TestDocsNameEveryConfigKey(t *testing.T) {
	t.Parallel()
	doc := readAPIDoc(t)
	var missing []string
	for _, key := range KnownKeys() {
		for _, name := range []string{key, "NEWSFEED_" + upperSnake(key)} {
			if !strings.Contains(doc, "`"+name+"`") {
				missing = append(missing, name)
			}
		}
	}
	require.Empty(t, missing, "config keys and environment variables missing from docs/API.md")
}

var (
	docMetricName = regexp.MustCompile(`newsfeed_[a-z_]+`)
	// A metric the code registers: a collector's Name or a Desc's name.
	codeMetricName = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(newsfeed_[a-z_]+)"`)
)

// registeredMetrics lists the newsfeed_ metrics that the Go code (tests
// aside) registers, found in the source of the repository.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != ".." && (strings.HasPrefix(name, ".") || name == "vendor" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range codeMetricName.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// TestDocsNameTheMetricsThatExist: every metric the code registers is in
// docs/API.md, and every newsfeed_ metric docs/API.md names exists.
func TestDocsNameTheMetricsThatExist(t *testing.T) {
	t.Parallel()
	doc := readAPIDoc(t)
	registered := registeredMetrics(t)
	require.NotEmpty(t, registered)
	documented := map[string]bool{}
	for _, name := range docMetricName.FindAllString(doc, -1) {
		documented[name] = true
	}
	var undocumented, unknown []string
	for name := range registered {
		if !documented[name] {
			undocumented = append(undocumented, name)
		}
	}
	for name := range documented {
		if !registered[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unknown)
	require.Empty(t, undocumented, "metrics registered in the code and missing from docs/API.md")
	require.Empty(t, unknown, "metrics named in docs/API.md that the code does not register")
}

// markdownLink is the target of an inline Markdown link or image;
// markdownReference, of a reference definition ("[name]: target").
var (
	markdownLink      = regexp.MustCompile(`\]\(([^)\s]*)`)
	markdownReference = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
)

// repositoryDocs returns the Markdown a reader of the repository is sent to,
// as slash paths from its root: every *.md file of the repository (README.md,
// CHANGELOG.md, CONTRIBUTING.md, docs/*.md, …), outside hidden, vendored and
// generated directories.
func repositoryDocs(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case p == "..":
			case strings.HasPrefix(name, "."), name == "vendor", name == "testdata", name == "node_modules",
				name == "bin", name == "build", name == "bench-results", name == "test-artifacts":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel("..", p)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	for _, want := range []string{"README.md", "CHANGELOG.md", "CONTRIBUTING.md", "docs/API.md", "docs/RUNBOOK.md"} {
		require.Contains(t, names, want)
	}
	return names
}

// TestDocsStayInsideTheRepository: whoever clones the repository has nothing
// else, so README.md and every docs/*.md link only to files of the
// repository that exist (relative to the file, without climbing out of the
// repository) or to http(s) addresses, and name no path outside it.
// docs/API.md, the reference, links to no address at all.
func TestDocsStayInsideTheRepository(t *testing.T) {
	t.Parallel()
	for _, name := range repositoryDocs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(name)))
			require.NoError(t, err)
			doc := string(raw)
			for _, outside := range []string{"../shared", "shared/API.md", "/work/", "../../"} {
				require.False(t, strings.Contains(doc, outside), "%s names a path outside the repository: %s", name, outside)
			}
			var targets []string
			for _, re := range []*regexp.Regexp{markdownLink, markdownReference} {
				for _, m := range re.FindAllStringSubmatch(doc, -1) {
					targets = append(targets, m[1])
				}
			}
			for _, target := range targets {
				checkDocLink(t, name, target)
			}
		})
	}
}

// checkDocLink checks one link target of the Markdown file name: a file of
// the repository that exists and, for an anchor in a Markdown file (or in
// name itself: "#anchor"), a heading of that file that GitHub gives this
// anchor.
func checkDocLink(t *testing.T, name, target string) {
	t.Helper()
	if target == "" {
		return
	}
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		require.NotEqual(t, "docs/API.md", name, "docs/API.md links outside the repository: %s", target)
		require.True(t, strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "http://"),
			"%s links to an address that is not http(s): %s", name, target)
		return
	}
	require.False(t, path.IsAbs(target), "%s links to an absolute path: %s", name, target)
	file, anchor, _ := strings.Cut(target, "#")
	inRepo := name
	if file != "" {
		inRepo = path.Clean(path.Join(path.Dir(name), file))
	}
	require.False(t, inRepo == ".." || strings.HasPrefix(inRepo, "../"),
		"%s links outside the repository: %s", name, target)
	_, err := os.Stat(filepath.Join("..", filepath.FromSlash(inRepo)))
	require.NoError(t, err, "%s links to a file the repository does not have: %s", name, target)
	if anchor == "" || !strings.HasSuffix(inRepo, ".md") {
		return
	}
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(inRepo)))
	require.NoError(t, err)
	require.True(t, markdownAnchors(string(raw))[anchor],
		"%s links to %s, which has no heading with the anchor #%s", name, inRepo, anchor)
}

var (
	markdownHeading = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	markdownFence   = regexp.MustCompile("^ {0,3}(```|~~~)")
	// An inline link or image in a heading: its text is what the anchor is
	// made of.
	headingLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// An explicit anchor: <a id="…"> or <a name="…">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// markdownAnchors returns the anchors GitHub gives the headings of a
// Markdown document (the heading's text in lower case, spaces made hyphens,
// punctuation but hyphens and underscores dropped; a repeated one gets -1,
// -2, …), and its explicit HTML anchors. Headings inside code fences are no
// headings.
func markdownAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if markdownFence.MatchString(line) {
			inFence = !inFence
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := markdownHeading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := headingSlug(headingLink.ReplaceAllString(m[1], "$1"))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// headingSlug is GitHub's anchor of a heading's text.
func headingSlug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestMarkdownAnchors: the anchors are GitHub's for the kinds of heading
// these docs have.
func TestMarkdownAnchors(t *testing.T) {
	t.Parallel()
	doc := "# newsfeed: commands, configuration\n" +
		"#### `GET /v1/feed/stream`: the home feed, live\n" +
		"### Operator console (`/admin`)\n" +
		"## NewsfeedDeliveryLate\n" +
		"## Live streams (issue 13, 2026-12-03)\n" +
		"```sh\n# not a heading\n```\n" +
		"## Redis down, [PostgreSQL](API.md) down ##\n" +
		"## Notes\n## Notes\n" +
		"<a id=\"custom\"></a>\n"
	want := []string{
		"newsfeed-commands-configuration", "get-v1feedstream-the-home-feed-live", "operator-console-admin",
		"newsfeeddeliverylate", "live-streams-issue-13-2026-12-03", "redis-down-postgresql-down",
		"notes", "notes-1", "custom",
	}
	got := markdownAnchors(doc)
	for _, a := range want {
		require.True(t, got[a], "anchor %s of %v", a, got)
	}
	require.False(t, got["not-a-heading"], "a comment in a code fence")
}

// TestRunbookURLsResolve: every alert's runbook_url (a path from the
// repository's root, as the alerts are read beside it) names a heading of a
// Markdown file of the repository.
func TestRunbookURLsResolve(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	urls := regexp.MustCompile(`(?m)^\s*runbook_url:\s*(\S+)\s*$`).FindAllStringSubmatch(string(raw), -1)
	require.NotEmpty(t, urls, "alerts.yml has runbook_url annotations")
	for _, u := range urls {
		file, anchor, found := strings.Cut(u[1], "#")
		require.True(t, found && anchor != "", "runbook_url %s names no section", u[1])
		require.True(t, strings.HasSuffix(file, ".md"), "runbook_url %s is no Markdown file of the repository", u[1])
		checkDocLink(t, "alerts.yml", u[1]) // relative to the root, as "alerts.yml" there would be
	}
}

// readmeMaxBytes bounds the README: it is the front door, read in five
// minutes; the rest lives one hop away, in docs/.
const readmeMaxBytes = 12 * 1024

// TestREADMEIsAFrontDoor: the README stays short and links every document
// of docs/, so that each is one hop from it.
func TestREADMEIsAFrontDoor(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(raw), readmeMaxBytes, "README.md is %d bytes: move the detail into docs/", len(raw))
	linked := map[string]bool{}
	for _, m := range markdownLink.FindAllStringSubmatch(string(raw), -1) {
		file, _, _ := strings.Cut(m[1], "#")
		linked[path.Clean(file)] = true
	}
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		name := path.Join("docs", filepath.Base(d))
		require.True(t, linked[name], "README.md does not link %s", name)
	}
	for _, name := range []string{"CONTRIBUTING.md", "CHANGELOG.md"} {
		require.True(t, linked[name], "README.md does not link %s", name)
	}
}
