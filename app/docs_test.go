package app

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

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

// markdownLink is the target of an inline Markdown link or image.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]*)`)

// TestDocsStayInsideTheRepository: whoever clones the repository has nothing
// else, so docs/API.md links only to files of the repository that exist,
// and names no path outside it.
func TestDocsStayInsideTheRepository(t *testing.T) {
	t.Parallel()
	doc := readAPIDoc(t)
	for _, outside := range []string{"../shared", "shared/API.md", "/work/", "../../"} {
		require.False(t, strings.Contains(doc, outside), "docs/API.md names a path outside the repository: %s", outside)
	}
	for _, m := range markdownLink.FindAllStringSubmatch(doc, -1) {
		target := m[1]
		if target == "" || strings.HasPrefix(target, "#") {
			continue
		}
		require.False(t, strings.Contains(target, "://"), "docs/API.md links outside the repository: %s", target)
		require.False(t, path.IsAbs(target), "docs/API.md links to an absolute path: %s", target)
		file, _, _ := strings.Cut(target, "#")
		inRepo := path.Clean(path.Join("docs", file))
		require.False(t, inRepo == ".." || strings.HasPrefix(inRepo, "../"),
			"docs/API.md links outside the repository: %s", target)
		_, err := os.Stat(filepath.Join("..", filepath.FromSlash(inRepo)))
		require.NoError(t, err, "docs/API.md links to a file the repository does not have: %s", target)
	}
}
