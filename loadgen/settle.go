package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SettleConfig describes what the winners of a sale do after the grab:
// some pay, some cancel, the rest never pay (their orders expire).
type SettleConfig struct {
	// URL is the base URL of the service.
	URL string
	// Winners maps each winner to their order id (Report.OrdersByUser
	// gives them).
	Winners map[int64]int64
	// PayShare and CancelShare are the shares of winners who pay and who
	// cancel; the others never pay. Winners are assigned by user id, so
	// the counts are exact: round(n * share).
	PayShare, CancelShare float64
	// Clicks is how many times each winner clicks pay (or cancel) at
	// once, as an impatient buyer double-clicks. Default 2. Every answer
	// must be the same.
	Clicks int
	// Concurrency bounds the winners acting at once. Default 32.
	Concurrency int
	// Confirm bounds the wait for an order to leave pending. Default 30s.
	Confirm time.Duration
	// Identify sets the user's identity on a request. Default: the
	// X-User-ID header.
	Identify func(r *http.Request, uid int64)
}

// SettleReport is what the winners did and were told.
type SettleReport struct {
	Paid      int `json:"paid"`
	Cancelled int `json:"cancelled"`
	Unpaid    int `json:"unpaid"` // chose never to pay
	// Refused counts pay or cancel calls refused, by error code (e.g. a
	// payment after the deadline: order_expired).
	Refused map[string]int `json:"refused,omitempty"`
	// Unequal counts winners whose simultaneous clicks got different
	// answers: an idempotency failure.
	Unequal int `json:"unequal"`
	// Errors counts transport errors, 5xx answers and orders that stayed
	// pending.
	Errors int `json:"errors"`
}

// Settle makes the winners pay, cancel or walk away, and reports what
// they were told.
func Settle(ctx context.Context, cfg SettleConfig) (*SettleReport, error) {
	if cfg.URL == "" {
		return nil, errors.New("loadgen: URL is required")
	}
	if cfg.PayShare < 0 || cfg.CancelShare < 0 || cfg.PayShare+cfg.CancelShare > 1 {
		return nil, errors.New("loadgen: PayShare and CancelShare must be >= 0 and add up to at most 1")
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	if cfg.Clicks <= 0 {
		cfg.Clicks = 2
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Confirm <= 0 {
		cfg.Confirm = 30 * time.Second
	}
	if cfg.Identify == nil {
		cfg.Identify = func(r *http.Request, uid int64) { r.Header.Set("X-User-ID", strconv.FormatInt(uid, 10)) }
	}
	users := make([]int64, 0, len(cfg.Winners))
	for uid := range cfg.Winners {
		users = append(users, uid)
	}
	slices.Sort(users)
	pay := int(float64(len(users))*cfg.PayShare + 0.5)
	cancel := min(int(float64(len(users))*cfg.CancelShare+0.5), len(users)-pay)

	s := &settler{cfg: cfg, rep: &SettleReport{Refused: map[string]int{}},
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}}
	defer s.client.CloseIdleConnections()
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	for i, uid := range users {
		action := ""
		switch {
		case i < pay:
			action = "pay"
		case i < pay+cancel:
			action = "cancel"
		default:
			s.count(func(r *SettleReport) { r.Unpaid++ })
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return s.rep, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.settle(ctx, uid, cfg.Winners[uid], action)
		}()
	}
	wg.Wait()
	return s.rep, ctx.Err()
}

type settler struct {
	cfg    SettleConfig
	client *http.Client
	mu     sync.Mutex
	rep    *SettleReport
}

func (s *settler) count(f func(*SettleReport)) {
	s.mu.Lock()
	f(s.rep)
	s.mu.Unlock()
}

// settle waits for the order to be written, then clicks the action
// Clicks times at once and compares the answers.
func (s *settler) settle(ctx context.Context, uid, oid int64, action string) {
	path := "/api/v1/orders/" + strconv.FormatInt(oid, 10)
	deadline := time.Now().Add(s.cfg.Confirm)
	for {
		status, body, err := s.do(ctx, "GET", path, uid, nil)
		if err == nil && status == http.StatusOK && !bytes.Contains(body, []byte(`"status":"pending"`)) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.count(func(r *SettleReport) { r.Errors++ })
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var body []byte
	if action == "pay" {
		body = []byte(`{"payment_ref":"demo-` + strconv.FormatInt(oid, 10) + `"}`)
	}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make([]answer, s.cfg.Clicks)
	// A click that got no answer, or a 5xx, is clicked again until the
	// deadline, as a buyer's app would: pay and cancel are idempotent (the
	// order id is the key), so the answer it then gets is the first one's.
	deadline = time.Now().Add(s.cfg.Confirm)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			for {
				a.status, a.body, a.err = s.do(ctx, "POST", path+"/"+action, uid, body)
				if a.err == nil && a.status < 500 || time.Now().After(deadline) || ctx.Err() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	first := answers[0]
	for _, a := range answers[1:] {
		if a.status != first.status || !bytes.Equal(a.body, first.body) {
			s.rep.Unequal++
			break
		}
	}
	switch {
	case first.err != nil || first.status >= 500:
		s.rep.Errors++
	case first.status == http.StatusOK && action == "pay":
		s.rep.Paid++
	case first.status == http.StatusOK:
		s.rep.Cancelled++
	default:
		s.rep.Refused[errorCode(first.body, first.status)]++
	}
}

func (s *settler) do(ctx context.Context, method, path string, uid int64, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.cfg.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	s.cfg.Identify(req, uid)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, b, err
}

// errorCode returns the code of a JSON error body, or the status.
func errorCode(body []byte, status int) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Code != "" {
		return e.Error.Code
	}
	return fmt.Sprintf("http_%d", status)
}
