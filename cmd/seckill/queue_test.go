package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/queue"
)

// TestWaitingRoom runs a sale behind a waiting room through serve: a grab
// needs the pass that the room gives the admitted; buyers are admitted in
// the order they joined, at the room's rate; at the sell-out every waiting
// buyer is told sold out; a cancelled order's unit admits the next in line;
// nothing is oversold.
func TestWaitingRoom(t *testing.T) {
	be := backend{"sqlite", redisURL(t), "sqlite://" + filepath.Join(t.TempDir(), "queue.db")}
	in := startServe(t, be, testenv.Prefix(t))
	const stock, buyers, rate = 5, 30, 20
	now := time.Now()
	body := fmt.Sprintf(`{"name":"queued","stock":%d,"starts_at":%q,"ends_at":%q,"queue":{"rate":%d}}`, stock,
		now.Add(-time.Second).Format(time.RFC3339Nano), now.Add(time.Hour).Format(time.RFC3339Nano), rate)
	r := in.do("POST", "/api/v1/activities", in.admin(), body)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	if q, _ := r.body["queue"].(map[string]any); q["rate"] != float64(rate) {
		t.Fatalf("created activity's queue: %v, want rate %d", r.body["queue"], rate)
	}
	id := int64(r.body["id"].(float64))
	queuePath := fmt.Sprintf("/api/v1/activities/%d/queue", id)

	if g := in.grab(id, 1); g.status != http.StatusForbidden || g.code() != "pass_required" {
		t.Fatalf("grab without a pass: %d %v, want 403 pass_required", g.status, g.body)
	}
	tickets := make([]string, buyers)
	for i := range tickets {
		j := in.do("POST", queuePath, user(int64(i+1)), "")
		if j.status != http.StatusOK {
			t.Fatalf("join by %d: %d %v", i+1, j.status, j.body)
		}
		tickets[i] = j.body["ticket"].(string)
	}
	if again := in.do("POST", queuePath, user(1), ""); again.body["ticket"] != tickets[0] {
		t.Fatalf("joining again gave another ticket")
	}
	if st := in.do("GET", queuePath, map[string]string{"X-User-ID": "2", "X-Queue-Ticket": tickets[0]}, ""); st.status != http.StatusBadRequest || st.code() != "ticket_invalid" {
		t.Fatalf("a poll with another's ticket: %d %v, want 400 ticket_invalid", st.status, st.body)
	}

	poll := func(i int) reply {
		return in.do("GET", queuePath, map[string]string{"X-User-ID": fmt.Sprint(i + 1), "X-Queue-Ticket": tickets[i]}, "")
	}
	grab := func(i int, pass string) reply {
		return in.do("POST", fmt.Sprintf("/api/v1/activities/%d/grab", id), map[string]string{"X-User-ID": fmt.Sprint(i + 1), "X-Queue-Pass": pass}, "")
	}
	// Each round polls the waiting buyers from the last to join to the
	// first: the instance's state only moves forward, so a buyer seen
	// admitted has everyone who joined before seen admitted too, and the
	// admitted must always be the first to join.
	admitted, told := 0, map[int]string{}
	sold, soldOutAt := 0, time.Time{}
	firstOrder, firstBuyer := "", 0
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		passes := map[int]string{}
		waiting := 0
		for i := buyers - 1; i >= 0; i-- {
			if told[i] != "" {
				continue
			}
			st := poll(i)
			switch s := st.body["state"]; s {
			case "admitted":
				told[i] = "admitted"
				passes[i] = st.body["pass"].(string)
			case "sold_out":
				told[i] = "sold_out"
			case "waiting":
				waiting++
			default:
				t.Fatalf("poll by %d: %d %v", i+1, st.status, st.body)
			}
		}
		for i := admitted; i < buyers && told[i] == "admitted"; i++ {
			admitted++
		}
		for i := admitted; i < buyers; i++ {
			if told[i] == "admitted" {
				t.Fatalf("buyer %d is admitted, and buyer %d, who joined before, is not: %v", i+1, admitted+1, told)
			}
		}
		for i := range buyers { // grab in the order of admission
			pass, ok := passes[i]
			if !ok {
				continue
			}
			if other := in.do("POST", fmt.Sprintf("/api/v1/activities/%d/grab", id), map[string]string{"X-User-ID": "999", "X-Queue-Pass": pass}, ""); other.code() != "pass_invalid" {
				t.Fatalf("grab with another buyer's pass: %d %v, want 403 pass_invalid", other.status, other.body)
			}
			switch g := grab(i, pass); {
			case g.status == http.StatusAccepted:
				sold++
				if firstOrder == "" {
					firstOrder, firstBuyer = g.body["order_id"].(string), i
				}
			case g.status == http.StatusConflict && g.code() == "sold_out":
			default:
				t.Fatalf("grab by admitted buyer %d: %d %v", i+1, g.status, g.body)
			}
			if sold == stock && soldOutAt.IsZero() {
				soldOutAt = time.Now()
			}
		}
		if waiting == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sold != stock {
		t.Fatalf("sold %d, want %d", sold, stock)
	}
	for i := range buyers {
		if told[i] == "" {
			t.Fatalf("buyer %d still waiting 30 s after the start", i+1)
		}
	}
	// After the sell-out, the admitter closes the room within a tick and
	// every instance reads it within a refresh: each waiting buyer's next
	// poll says sold out (the loop above stopped once every buyer was told
	// admitted or sold out).
	req, _ := http.NewRequest("GET", in.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+in.token)
	resp, err := in.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	for _, want := range []string{
		fmt.Sprintf(`seckill_queue_joined_total{activity="%d"} %d`, id, buyers),
		fmt.Sprintf(`seckill_queue_admitted_total{activity="%d"} %d`, id, admitted),
		fmt.Sprintf(`seckill_queue_closed{activity="%d"} 1`, id),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	t.Logf("%d admitted in the order of joining, %d sold; the last waiting buyer told sold out %v after the sell-out",
		admitted, sold, time.Since(soldOutAt).Round(time.Millisecond))

	// A cancelled order's unit comes back: the room opens again, and the
	// next in line (told sold out until then) is admitted and buys it.
	owner := user(int64(firstBuyer + 1))
	orderPath := "/api/v1/orders/" + firstOrder
	testenv.WaitFor(t, "the first order written", func() bool {
		return in.do("GET", orderPath, owner, "").body["status"] == "confirmed"
	})
	if c := in.do("POST", orderPath+"/cancel", owner, ""); c.status != http.StatusOK {
		t.Fatalf("cancel %s: %d %v", firstOrder, c.status, c.body)
	}
	next := admitted
	var pass string
	testenv.WaitFor(t, "the next in line admitted after the cancel", func() bool {
		st := poll(next)
		pass, _ = st.body["pass"].(string)
		return pass != ""
	})
	if g := grab(next, pass); g.status != http.StatusAccepted {
		t.Fatalf("the next in line, admitted after the cancel: grab %d %v, want 202", g.status, g.body)
	}
	if st := poll(next + 1); st.body["state"] == "admitted" {
		// The rate admits more than the one unit (no hold): they find it sold.
		if g := grab(next+1, st.body["pass"].(string)); g.status != http.StatusConflict {
			t.Errorf("a second buyer after one unit came back: grab %d %v, want 409", g.status, g.body)
		}
	}
}

// TestWaitingRoomInBrowser: the buyer's page in headless Chromium, on
// serve with a proof of work on joining: a buyer joins before the start
// (the page does the work, and says the buyer is in the draw), is admitted
// after it, buys with the Buy button, and sees the order written; the
// dashboard then shows the room.
func TestWaitingRoomInBrowser(t *testing.T) {
	testenv.NeedBinary(t, "chromium")
	be := backend{"sqlite", redisURL(t), "sqlite://" + filepath.Join(t.TempDir(), "queue.db")}
	in := startServe(t, be, testenv.Prefix(t), "--queue-work-bits=10")
	// The browser starts first: the buyer must join before the sale does.
	br := newBrowser(t, 900, 900)
	starts := time.Now().Add(6 * time.Second)
	body := fmt.Sprintf(`{"name":"concert","stock":3,"starts_at":%q,"ends_at":%q,"queue":{"rate":5}}`,
		starts.Format(time.RFC3339Nano), starts.Add(time.Hour).Format(time.RFC3339Nano))
	r := in.do("POST", "/api/v1/activities", in.admin(), body)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	id := int64(r.body["id"].(float64))
	queuePath := fmt.Sprintf("/api/v1/activities/%d/queue", id)
	if j := in.do("POST", queuePath, user(2), ""); j.status != http.StatusForbidden || j.code() != "work_required" {
		t.Fatalf("join without the work: %d %v, want 403 work_required", j.status, j.body)
	}
	for uid := int64(2); uid <= 3; uid++ { // two more buyers in the draw
		c := in.do("GET", queuePath+"/challenge", user(uid), "")
		challenge, bits := c.body["challenge"].(string), int(c.body["bits"].(float64))
		h := user(uid)
		h["X-Queue-Challenge"], h["X-Queue-Nonce"] = challenge, queue.Solve(challenge, bits)
		if j := in.do("POST", queuePath, h, ""); j.status != http.StatusOK {
			t.Fatalf("join by %d: %d %v", uid, j.status, j.body)
		}
	}

	br.do("open the page", chromedp.Navigate(fmt.Sprintf("%s/queue/?activity=%d", in.url, id)),
		chromedp.WaitVisible(chromedp.CSS("#who")))
	br.waitFor("the page shows the sale", `document.getElementById("title").textContent === "concert"`)
	br.do("join as user 1", chromedp.SendKeys(chromedp.CSS(`#who input[name="user"]`), "1"),
		chromedp.Click(chromedp.CSS("#join")))
	br.waitFor("the page says the buyer is in the draw", `!document.getElementById("place").hidden &&
		document.getElementById("detail").textContent.includes("random order") &&
		document.getElementById("state").textContent === "Waiting for the start"`)
	if time.Now().After(starts) {
		t.Fatalf("the buyer joined after the start (%v late): the test asks for a joiner of the draw", time.Since(starts))
	}
	br.waitFor("the buyer is admitted after the start", `!document.getElementById("buy").hidden`)
	br.do("buy", chromedp.Click(chromedp.CSS("#buy")))
	br.waitFor("the page follows the order until it is written", `!document.getElementById("order").hidden &&
		document.getElementById("order-state").textContent === "confirmed"`)
	if got := br.text("#state"); got != "You got one" {
		t.Errorf("state shown %q, want %q", got, "You got one")
	}
	br.done("seckill-queue")

	// The dashboard shows the room: the three buyers of the draw admitted
	// (the sale's rate is 5 a second), no one waiting.
	br.do("open the dashboard", chromedp.Navigate(fmt.Sprintf("%s/dashboard/#activity=%d", in.url, id)))
	br.waitFor("the dashboard shows the waiting room", `getComputedStyle(document.getElementById("queue-card")).display !== "none" &&
		document.getElementById("queue-waiting").textContent === "0" &&
		document.getElementById("queue-detail").textContent.startsWith("3 admitted") &&
		document.getElementById("queue-detail").textContent.includes("of 5/s")`)
	br.done("seckill-queue-dashboard")
}
