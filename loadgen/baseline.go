package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// The baseline is the ceiling of this machine: the same generator against
// a handler that does nothing but answer like a grab. The bench reports
// grab throughput as a ratio to it, which says how much the sale itself
// costs, whatever the machine. It should run in a process of its own, as
// the service does, so that the two share the CPU with the generator alike.

var (
	jsonContentType = []string{"application/json"}
	baselineHead    = []byte(`{"order_id":"`)
	baselineTail    = []byte(`","status":"pending"}` + "\n")
	baselineInvalid = []byte(`{"error":{"code":"invalid_argument","message":"X-User-ID must be a positive integer"}}` + "\n")
)

// BaselineHandler answers every request as a grab that made a new order:
// 202 {"order_id":"<user id>","status":"pending"}, the order id being the
// X-User-ID, so that the generator's per-user bookkeeping has work to do.
// Without a valid X-User-ID it answers 400 invalid_argument (GET /healthz
// gets 202 too: it is only used to warm up connections).
func BaselineHandler(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	uid := r.Header.Get("X-User-Id")
	if r.Method == http.MethodGet {
		uid = "1"
	}
	if !positiveDecimal(uid) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(baselineInvalid)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(baselineHead)
	_, _ = io.WriteString(w, uid)
	_, _ = w.Write(baselineTail)
}

func positiveDecimal(s string) bool {
	if s == "" || len(s) > 19 || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ServeBaseline serves BaselineHandler on ln until ctx is cancelled, then
// shuts down gracefully. Meant for a process of its own (the bench starts
// one and reads the address it listens on).
func ServeBaseline(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           http.HandlerFunc(BaselineHandler),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// MeasureBaseline runs the generator with cfg's settings (users, requests,
// duration, concurrency, repeat share, rate, timeout) against a baseline
// server at baseURL, without start gate or progress.
func MeasureBaseline(ctx context.Context, cfg Config, baseURL string) (*Report, error) {
	cfg.URL = baseURL
	cfg.StartAt = time.Time{}
	cfg.Progress = nil
	cfg.WatchRemaining = false
	return Run(ctx, cfg)
}

// Ratio is the throughput of r as a share of the baseline's (0 if the
// baseline did nothing).
func Ratio(r, baseline *Report) float64 {
	if r == nil || baseline == nil || baseline.Throughput == 0 {
		return 0
	}
	return r.Throughput / baseline.Throughput
}
