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

// markdownLink is the target of an inline Markdown link or image;
// markdownReference, of a reference definition ("[name]: target").
var (
	markdownLink      = regexp.MustCompile(`\]\(([^)\s]*)`)
	markdownReference = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
)

// repositoryDocs returns the Markdown a reader of the repository is sent to,
// as slash paths from its root: README.md and every docs/*.md.
func repositoryDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	names := []string{"README.md"}
	for _, d := range docs {
		names = append(names, path.Join("docs", filepath.Base(d)))
	}
	require.Contains(t, names, "docs/API.md")
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

// checkDocLink checks one link target of the Markdown file name.
func checkDocLink(t *testing.T, name, target string) {
	t.Helper()
	if target == "" || strings.HasPrefix(target, "#") {
		return
	}
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		require.NotEqual(t, "docs/API.md", name, "docs/API.md links outside the repository: %s", target)
		require.True(t, strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "http://"),
			"%s links to an address that is not http(s): %s", name, target)
		return
	}
	require.False(t, path.IsAbs(target), "%s links to an absolute path: %s", name, target)
	file, _, _ := strings.Cut(target, "#")
	inRepo := path.Clean(path.Join(path.Dir(name), file))
	require.False(t, inRepo == ".." || strings.HasPrefix(inRepo, "../"),
		"%s links outside the repository: %s", name, target)
	_, err := os.Stat(filepath.Join("..", filepath.FromSlash(inRepo)))
	require.NoError(t, err, "%s links to a file the repository does not have: %s", name, target)
}
