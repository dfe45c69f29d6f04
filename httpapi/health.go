package httpapi

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Health checks a dependency; nil means healthy.
type Health func(ctx context.Context) error

// healthTTL is how long a dependency's answer is reused: whatever the rate
// of /healthz, each dependency is asked at most once per healthTTL.
const healthTTL = time.Second

// healthCheck is one dependency's check and its last answer.
type healthCheck struct {
	name  string
	check Health
	mu    sync.Mutex // held while checking
	last  atomic.Pointer[healthResult]
}

type healthResult struct {
	err error
	at  time.Time // when the check ended
}

// result returns an answer at most healthTTL old. While one request checks,
// the others take the previous answer rather than queue (only the very
// first check is waited for).
func (h *healthCheck) result(ctx context.Context) *healthResult {
	if r := h.last.Load(); r != nil && time.Since(r.at) < healthTTL {
		return r
	}
	if !h.mu.TryLock() {
		if r := h.last.Load(); r != nil {
			return r
		}
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if r := h.last.Load(); r != nil && time.Since(r.at) < healthTTL {
		return r
	}
	// Not the request's context: a client that leaves must not make the
	// dependency look down for the next second.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	r := &healthResult{err: h.check(ctx)}
	r.at = time.Now()
	h.last.Store(r)
	return r
}

func newHealthChecks(health map[string]Health) []*healthCheck {
	checks := make([]*healthCheck, 0, len(health))
	for name, check := range health {
		checks = append(checks, &healthCheck{name: name, check: check})
	}
	sort.Slice(checks, func(i, j int) bool { return checks[i].name < checks[j].name })
	return checks
}

// healthz answers 200 when every dependency answered its last check, else
// 503. The checks say "ok" or "unavailable"; the errors themselves
// (addresses, driver messages) only to the admin.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	detailed := false
	if len(r.Header["Authorization"]) > 0 {
		if err := s.admin(r); err != nil {
			writeError(w, err)
			return
		}
		detailed = true
	}
	checks := map[string]string{}
	status := http.StatusOK
	for _, h := range s.health {
		res := h.result(r.Context())
		switch {
		case res.err == nil:
			checks[h.name] = "ok"
		case detailed:
			checks[h.name] = res.err.Error()
			status = http.StatusServiceUnavailable
		default:
			checks[h.name] = "unavailable"
			status = http.StatusServiceUnavailable
		}
	}
	summary := "ok"
	if status != http.StatusOK {
		summary = "unavailable"
	}
	writeJSON(w, status, map[string]any{"status": summary, "checks": checks})
}
