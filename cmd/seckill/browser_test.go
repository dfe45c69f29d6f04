package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/seckilldev/seckill/internal/testenv"
)

// browser is a headless Chromium for a test, its files in the test's own
// directories (see chromiumDirs); every step is bounded (a liveness bound
// for a loaded machine). It records what its pages throw and what their
// Content-Security-Policy refuses; done checks that neither happened.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	jsErrors []string
}

// newBrowser starts Chromium, sized width x height; a cleanup closes it.
func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	testenv.NeedBinary(t, "chromium") // Debian: apt-get install chromium
	profile, tmp := chromiumDirs(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile), chromedp.Env("TMPDIR="+tmp))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root without it
	}
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, stopBrowser := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: bctx}
	// The browser closes gracefully first (it removes its own singleton
	// files then), before the cancels kill what is left, and before
	// chromiumDirs' cleanup (registered earlier, run later) removes its
	// directories.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("close chromium: %v", err)
		}
		stopBrowser()
		stopAlloc()
	})
	// Listen starts the browser, on a context without a timeout: the
	// browser lives as long as that first context.
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			b.mu.Lock()
			b.jsErrors = append(b.jsErrors, fmt.Sprintf("%s (%s:%d)", e.ExceptionDetails.Text, e.ExceptionDetails.URL, e.ExceptionDetails.LineNumber))
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Whatever a page's Content-Security-Policy refuses it (a script, a
	// style, a connection) is recorded, from before the page's first line.
	b.do("watch for refusals of the page's policy", chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
		_, err := cdp.Call(ctx, tgt, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.cspRefusals = [];
				document.addEventListener("securitypolicyviolation",
					(e) => window.cspRefusals.push(e.violatedDirective + " " + e.blockedURI + " (" + e.sourceFile + ":" + e.lineNumber + ")"));`})
		return err
	}))
	return b
}

func (b *browser) within() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 90*time.Second)
}

// do runs steps, failing the test with what if they fail.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.within()
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor waits until the page's JavaScript predicate holds.
func (b *browser) waitFor(what, predicate string) {
	b.t.Helper()
	ctx, cancel := b.within()
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate, chromedp.WithPollingTimeout(80*time.Second))); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text returns the text of the element sel, trimmed.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.within()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// done takes a screenshot, name.png in the test's directory or, to keep
// it, in $SECKILL_SCREENSHOTS (the test logs where), and fails the test if
// a page threw or its policy refused anything.
func (b *browser) done(name string) {
	b.t.Helper()
	ctx, cancel := b.within()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("SECKILL_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir() // removed with the test's directory: -v logs where
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d bytes)", path, len(png))
	refusals, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.cspRefusals`))
	if err != nil || len(refusals) > 0 {
		b.t.Errorf("the page's Content-Security-Policy refused: %v %v", refusals, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.jsErrors) > 0 {
		b.t.Errorf("the page threw: %v", b.jsErrors)
	}
}
