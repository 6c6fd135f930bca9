// Package browser drives headless Chromium (Debian's chromium package) from
// tests, through the DevTools protocol with chromedp: start a browser for a
// test, open pages in browser contexts of their own (one a user: their own
// storage and cookies), act on them, wait on the page's state with a
// deadline, and save screenshots as test artifacts.
//
// Without Chromium a test skips with a message saying how to install it,
// unless NEWSFEED_TEST_BROWSER=required (`make test` sets it, so that CI
// fails rather than passes without having run the browser tests).
// NEWSFEED_TEST_CHROMIUM names the browser's binary when it is not
// chromium or chromium-browser on PATH.
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Timeout bounds every wait and action: generous, for a loaded 2-core
// machine running the race detector. Waits return as soon as the page is
// in the state asked for.
const Timeout = 45 * time.Second

// Find returns the path of the Chromium binary: NEWSFEED_TEST_CHROMIUM,
// else chromium or chromium-browser on PATH.
func Find() (string, error) {
	if p := os.Getenv("NEWSFEED_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil { //nolint:gosec // the path the tester named
			return "", fmt.Errorf("NEWSFEED_TEST_CHROMIUM: %w", err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium is not installed (scripts/services.sh --browser installs it; " +
		"or: apt-get install chromium; or set NEWSFEED_TEST_CHROMIUM)")
}

// Required reports whether a test must fail, not skip, without Chromium.
func Required() bool { return os.Getenv("NEWSFEED_TEST_BROWSER") == "required" }

// Browser is one headless Chromium process, for one test.
type Browser struct {
	t   testing.TB
	ctx context.Context // the browser's first tab; pages are made from it
}

// Start starts Chromium with a fresh profile for t and stops it when t
// ends. Without Chromium it skips t, or fails it when Required.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := Find()
	if err != nil {
		if Required() {
			t.Fatalf("browser tests are required (NEWSFEED_TEST_BROWSER=required) and %v", err)
		}
		t.Skipf("skipping the browser test: %v; `make test` runs it", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // as root, and in containers, the sandbox cannot start
		chromedp.DisableGPU,
		// The machine has no network but the package registries: a browser
		// that phones home hangs on or floods refused connections.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1000, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser, which lives as long as the
	// context of that action: ctx, so the deadline is kept here.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", path, err)
		}
	case <-time.After(Timeout):
		t.Fatalf("start %s: no answer within %s", path, Timeout)
	}
	return &Browser{t: t, ctx: ctx}
}

// Page is one tab in a browser context of its own: one user's session,
// with storage no other page shares.
type Page struct {
	t    testing.TB
	name string
	ctx  context.Context

	mu         sync.Mutex
	console    []string // what the page wrote to its console, for a failure's log
	exceptions []string // uncaught exceptions and unhandled rejections
}

// NewPage opens a tab in a new browser context; name says whose it is in
// messages.
func (b *Browser) NewPage(name string) *Page {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	p := &Page{t: b.t, name: name, ctx: ctx}
	messages := chromedp.Console(ctx) // subscribes now: nothing is missed
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			p.mu.Lock()
			line := fmt.Sprintf("%s: %s", m.Type, m.Text)
			if m.URL != "" {
				line += " (" + m.URL + ")"
			}
			line = secretParams.ReplaceAllString(line, "${1}…")
			p.console = append(p.console, line)
			if m.IsException() {
				p.exceptions = append(p.exceptions, line)
			}
			p.mu.Unlock()
		}
	}()
	b.t.Cleanup(func() {
		if b.t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			b.t.Logf("console of %s's page:\n  %s", name, strings.Join(p.console, "\n  "))
		}
	})
	return p
}

// Context is the page's chromedp context, for actions this type has no
// method for: chromedp.Do(p.Context(), …).
func (p *Page) Context() context.Context { return p.ctx }

// Do runs actions, each within Timeout, and fails the test on an error.
func (p *Page) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %s: %v", p.name, what, err)
	}
}

// Navigate loads url and waits for its load event.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	p.Do("navigate to "+url, chromedp.Navigate(url))
}

// Click clicks the element the CSS selector finds, once it is visible.
func (p *Page) Click(css string) {
	p.t.Helper()
	p.Do("click "+css, chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible))
}

// Fill replaces the value of the field the CSS selector finds with text,
// typed as keys, so that the page sees input events as from a person.
func (p *Page) Fill(css, text string) {
	p.t.Helper()
	p.Do("fill "+css,
		chromedp.WaitVisible(chromedp.CSS(css)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%s).value = ''`, JS(css))),
		chromedp.SendKeys(chromedp.CSS(css), text),
	)
}

// Keys sends key presses to the element that has the focus.
func (p *Page) Keys(keys string) {
	p.t.Helper()
	p.Do("press keys", chromedp.KeyEvent(keys))
}

// Eval evaluates a JavaScript expression in the page and returns its
// value, decoded into T.
func Eval[T any](p *Page, expression string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		p.t.Fatalf("%s: evaluate %s: %v", p.name, expression, err)
	}
	return v
}

// WaitFor waits until the JavaScript expression is truthy in the page, for
// at most Timeout, and fails the test saying what it waited for.
func (p *Page) WaitFor(what, expression string) {
	p.t.Helper()
	p.WaitWithin(Timeout, what, expression)
}

// WaitWithin is WaitFor with a deadline of its own.
func (p *Page) WaitWithin(timeout time.Duration, what, expression string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout+5*time.Second)
	defer cancel()
	// Polled on a timer, not on animation frames, which a browser may
	// throttle for a tab in the background.
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expression,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		p.failureScreenshot()
		p.t.Fatalf("%s: waited %s for %s: %v", p.name, timeout, what, err)
	}
}

// failureScreenshot saves what the page shows when a wait failed, to see
// why; it only logs when even that fails.
func (p *Page) failureScreenshot() {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Logf("%s: no screenshot of the failure: %v", p.name, err)
		return
	}
	path := filepath.Join(ArtifactDir(p.t), "failed-"+unsafeChars.ReplaceAllString(p.name, "_")+".png")
	if err := os.WriteFile(path, png, 0o600); err != nil {
		p.t.Logf("%s: no screenshot of the failure: %v", p.name, err)
		return
	}
	p.t.Logf("%s's page when the wait failed: %s", p.name, path)
}

// Text returns the text content of the element the CSS selector finds.
func (p *Page) Text(css string) string {
	p.t.Helper()
	return Eval[string](p, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ''`, JS(css)))
}

// RequireNoExceptions fails the test if the page threw an exception or
// left a promise rejection unhandled.
func (p *Page) RequireNoExceptions() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.exceptions) > 0 {
		p.t.Fatalf("%s's page threw:\n  %s", p.name, strings.Join(p.exceptions, "\n  "))
	}
}

// Screenshot saves what the page's viewport shows as a PNG named name in
// the test's artifact directory (ArtifactDir) and returns its path.
func (p *Page) Screenshot(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("%s: screenshot: %v", p.name, err)
	}
	path := filepath.Join(ArtifactDir(p.t), name)
	if err := os.WriteFile(path, png, 0o600); err != nil {
		p.t.Fatalf("save screenshot: %v", err)
	}
	p.t.Logf("screenshot of %s's page: %s", p.name, path)
	return path
}

// ArtifactDir is where a test saves what it leaves for people to look at:
// $NEWSFEED_TEST_ARTIFACTS/<test name>, by default test-artifacts/<test
// name> at the repository's root (git-ignored). It is emptied first.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("NEWSFEED_TEST_ARTIFACTS")
	if root == "" {
		_, file, _, _ := runtime.Caller(0)
		root = filepath.Join(filepath.Dir(file), "..", "..", "test-artifacts")
	}
	dir := filepath.Join(root, unsafeChars.ReplaceAllString(t.Name(), "_"))
	artifactDirs.Lock()
	defer artifactDirs.Unlock()
	if !artifactDirs.made[dir] {
		if err := os.RemoveAll(dir); err != nil { //nolint:gosec // the test's own directory under the tester's root
			t.Fatalf("empty %s: %v", dir, err)
		}
		artifactDirs.made[dir] = true
	}
	if err := os.MkdirAll(dir, 0o750); err != nil { //nolint:gosec // as above
		t.Fatalf("make %s: %v", dir, err)
	}
	return dir
}

var (
	// secretParams are the query parameters a log line must not show.
	secretParams = regexp.MustCompile(`((?:access_token|token)=)[^&\s)]+`)
	unsafeChars  = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
	artifactDirs = struct {
		sync.Mutex
		made map[string]bool
	}{made: map[string]bool{}}
)

// JS quotes s as a JavaScript string literal, for expressions built in Go.
func JS(s string) string {
	b, err := json.Marshal(s) // JSON strings are JavaScript strings
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(b)
}
