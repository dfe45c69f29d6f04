package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/loadgen"
)

// The dashboard in a real browser (headless Chromium), during a real sale
// on serve with Redis and PostgreSQL: the page follows the stock from 100
// down to 0, counts 100 accepted grabs, and the admin view, whose form
// created the sale, shows the checker's verdict; a sale in 16 buckets shows
// a bar a bucket. The screenshots, Chromium's
// profile and its temporary files all live in the test's own directories,
// removed at its end (see chromiumDirs).
func TestDashboardInBrowser(t *testing.T) {
	testenv.NeedBinary(t, "chromium") // before the comparison's run
	redisURL := "redis://" + testenv.RedisAddr(t)
	// A small comparison of strategies first, through the command line, on
	// a database of its own: the dashboard charts what it saved.
	results := filepath.Join(t.TempDir(), "compare.json")
	var out strings.Builder
	if code := run(context.Background(), []string{"bench", "--compare", "--results", results, "--redis", redisURL,
		"--db", testenv.PostgresURL(t), "--strategies", "naive,lua", "--users", "300", "--requests", "600",
		"--rounds", "1"}, &out, &out); code != 0 {
		t.Fatalf("bench --compare exited %d:\n%s", code, out.String())
	}
	in := startServe(t, backend{name: "postgres", redisURL: redisURL, dbURL: testenv.PostgresURL(t)},
		testenv.Prefix(t), "--compare-results="+results)

	br := newBrowser(t, 1400, 1800)
	do, waitFor, text := br.do, br.waitFor, br.text

	// The page is open before the sale, with the admin token set.
	do("open the dashboard", chromedp.Navigate(in.url+"/dashboard/"),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")),
		chromedp.SendKeys(chromedp.CSS("#token"), in.token),
		chromedp.Click(chromedp.CSS("#token-form button"))) // not form.submit(): that skips the page's handler
	waitFor("the token taken", `document.getElementById("token-state").textContent.startsWith("token set")`)
	// The sale is created with the admin view's form.
	const stock = 100
	do("create the sale with the admin form",
		chromedp.SetValue(chromedp.CSS(`#create-form input[name="stock"]`), fmt.Sprint(stock)),
		chromedp.SetValue(chromedp.CSS(`#create-form input[name="starts_in"]`), "2"),
		chromedp.Click(chromedp.CSS("#create-form button")))
	waitFor("the form created the sale", `document.getElementById("create-result").textContent.startsWith("created activity #")`)
	var id int64
	if _, err := fmt.Sscanf(text("#create-result"), "created activity #%d,", &id); err != nil {
		t.Fatalf("the form said %q: %v", text("#create-result"), err)
	}
	r := in.do("GET", fmt.Sprintf("/api/v1/activities/%d", id), nil, "")
	startsAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.body["starts_at"]))
	if r.status != http.StatusOK || r.body["stock"] != float64(stock) || err != nil {
		t.Fatalf("the sale the form created: %d %v %v", r.status, r.body, err)
	}
	waitFor("the page shows the new sale, full", fmt.Sprintf(`document.getElementById("activity-title").textContent.endsWith("(#%d)") &&
		document.getElementById("remaining-redis").textContent === "%d"`, id, stock))

	rep, err := loadgen.Run(context.Background(), loadgen.Config{URL: in.url, ActivityID: id, Users: 3000,
		Concurrency: 32, RepeatShare: 0.2, StartAt: startsAt})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Accepted != stock {
		t.Fatalf("the crowd got %d orders of %d", rep.Counts.Accepted, stock)
	}

	waitFor("the page shows the sale sold out", `document.getElementById("remaining-redis").textContent === "0" &&
		document.getElementById("accepted-total").textContent === "100" &&
		document.getElementById("sold-out-at").textContent !== "–"`)
	waitFor("the page charts the comparison", `!document.getElementById("compare-charts").hidden &&
		document.getElementById("compare-note").textContent.includes("300 users")`)
	waitFor("the page shows every order written", `document.getElementById("remaining-db").textContent === "0" &&
		document.getElementById("states").textContent.includes("confirmed 100")`)
	waitFor("the admin view shows the checker's verdict",
		`document.getElementById("check-state").textContent.includes("all invariants held")`)
	if got := text("#remaining-redis"); got != "0" {
		t.Errorf("remaining shown %q, want 0", got)
	}
	if got := text("#accepted-total"); got != fmt.Sprint(stock) {
		t.Errorf("accepted shown %q, want %d", got, stock)
	}
	// The table's rows are made anew with every frame of the stream: a row
	// found by one call and read by the next may be gone in between (read
	// as ""), so the page is asked in one expression.
	waitFor("the activities row says sold out", fmt.Sprintf(
		`(document.querySelector('#activities tr[data-activity="%d"]')?.textContent ?? "").includes("sold out")`, id))

	br.done("seckill-dashboard")

	// A sale split into 16 buckets: a bar a bucket, once Redis holds it
	// (after its first grab); the grabbing user's home bucket has one less.
	now := time.Now()
	b := in.do("POST", "/api/v1/activities", in.admin(), fmt.Sprintf(`{"name":"split","stock":64,"starts_at":%q,"ends_at":%q,"buckets":16}`,
		now.Add(-time.Second).Format(time.RFC3339Nano), now.Add(time.Hour).Format(time.RFC3339Nano)))
	if b.status != http.StatusCreated {
		t.Fatalf("create a sale of 16 buckets: %d %v", b.status, b.body)
	}
	bid := int64(b.body["id"].(float64))
	if g := in.grab(bid, 1); g.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", g.status, g.body)
	}
	do("follow the sale of 16 buckets", chromedp.Navigate(fmt.Sprintf("%s/dashboard/#activity=%d", in.url, bid)))
	waitFor("a bar a bucket", `(() => {
		const el = document.getElementById("buckets");
		const titles = [...el.children].map((c) => c.title);
		return !el.hidden && el.title === "16 buckets" && titles.length === 16 &&
			titles.filter((x) => x.endsWith(": 4 left")).length === 15 && titles.filter((x) => x.endsWith(": 3 left")).length === 1;
	})()`)
	if shown := br.text("#activity-title"); shown != fmt.Sprintf("split (#%d)", bid) {
		t.Fatalf("following %q, want the sale of 16 buckets", shown)
	}
	waitFor("no waiting room card for a sale without one", `getComputedStyle(document.getElementById("queue-card")).display === "none"`)
	br.done("seckill-dashboard-buckets")
}

// An open dashboard page does not hold serve's drain: its stream ends when
// the drain begins, and serve stops cleanly (startServe's cleanup fails the
// test if serve returns an error, as it does when --drain-timeout runs out
// on a busy connection).
func TestServeDrainsWithOpenDashboard(t *testing.T) {
	var stream io.Closer = io.NopCloser(nil)
	t.Cleanup(func() { stream.Close() }) // after serve's cleanup: the page stays open through the drain
	in := startServe(t, backend{name: "postgres", redisURL: "redis://" + testenv.RedisAddr(t),
		dbURL: testenv.PostgresURL(t)}, testenv.Prefix(t))
	resp, err := http.Get(in.url + "/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	stream = resp.Body
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || first != "retry: 2000\n" {
		t.Fatalf("stream began with %q, %v", first, err)
	}
}

// chromiumDirs returns Chromium's profile (--user-data-dir) and the TMPDIR
// of its processes, in a directory of the test's own: Chromium leaves
// org.chromium.Chromium.* directories (its singleton socket) and, with
// --disable-dev-shm-usage, .org.chromium.Chromium.* shared-memory files in
// its TMPDIR, and a profile in the system's temporary directory unless
// given one. A cleanup, which runs after the test's deferred calls stopped
// the browser, removes the directory (retrying while a child process of
// Chromium that outlived it still writes there) and fails the test if it
// cannot.
func chromiumDirs(t *testing.T) (profile, tmp string) {
	t.Helper()
	dir := t.TempDir()
	profile, tmp = filepath.Join(dir, "profile"), filepath.Join(dir, "tmp")
	for _, d := range []string{profile, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if left, _ := filepath.Glob(filepath.Join(tmp, "*org.chromium.Chromium.*")); len(left) > 0 {
			t.Logf("chromium left %d files in its TMPDIR, removed now: %v", len(left), left)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("chromium's directories stay: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return profile, tmp
}
