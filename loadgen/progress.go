package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is a snapshot of a run, passed to Config.Progress.
type Progress struct {
	Elapsed  time.Duration // since the start gate
	Requests int64         // finished so far
	// Throughput is the rate over the last interval, in requests/s.
	Throughput float64
	Accepted   int64 // 202
	Already    int64 // 200
	SoldOut    int64 // 409 sold_out
	Rejected   int64 // not_started, ended, not_found, invalid
	Failed     int64 // unavailable, other, transport errors, timeouts
	// Remaining is the activity's remaining stock as the service last
	// reported it; valid only if RemainingKnown (Config.WatchRemaining).
	Remaining      int64
	RemainingKnown bool
	// Final is set on the last call, after the run.
	Final bool
}

func (r *run) snapshot() Progress {
	c := &r.counts
	return Progress{
		Elapsed:  time.Since(r.start),
		Requests: r.done.Load(),
		Accepted: c[outAccepted].Load(),
		Already:  c[outAlready].Load(),
		SoldOut:  c[outSoldOut].Load(),
		Rejected: c[outNotStarted].Load() + c[outEnded].Load() + c[outNotFound].Load() + c[outInvalid].Load(),
		Failed:   c[outUnavailable].Load() + c[outUnknown].Load() + c[outOther].Load() + c[outError].Load() + c[outTimeout].Load(),
	}
}

// progressLoop calls Config.Progress every interval until stop is closed,
// then once more with Final set.
func (r *run) progressLoop(ctx context.Context, stop <-chan struct{}) {
	if r.cfg.Progress == nil {
		<-stop
		return
	}
	var remaining atomic.Int64 // remaining + 1; 0 = unknown
	var wg sync.WaitGroup
	watchCtx, cancel := context.WithCancel(ctx)
	if r.cfg.WatchRemaining {
		wg.Go(func() { r.watchRemaining(watchCtx, &remaining) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	var last Progress
	emit := func(final bool) {
		p := r.snapshot()
		if dt := (p.Elapsed - last.Elapsed).Seconds(); dt > 0 {
			p.Throughput = float64(p.Requests-last.Requests) / dt
		}
		if final && p.Elapsed > 0 {
			p.Throughput = float64(p.Requests) / p.Elapsed.Seconds()
		}
		if v := remaining.Load(); v > 0 {
			p.Remaining, p.RemainingKnown = v-1, true
		}
		p.Final = final
		last = p
		r.cfg.Progress(p)
	}
	for {
		select {
		case <-t.C:
			emit(false)
		case <-stop:
			emit(true)
			return
		}
	}
}

// watchRemaining polls the activity on a connection of its own, so as not
// to take one from the workers.
func (r *run) watchRemaining(ctx context.Context, remaining *atomic.Int64) {
	tr := newTransport(1, r.cfg.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: max(r.cfg.ProgressInterval, time.Second)}
	u := r.cfg.URL + "/api/v1/activities/" + strconv.FormatInt(r.cfg.ActivityID, 10)
	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return
		}
		if resp, err := client.Do(req); err == nil {
			var a struct {
				Remaining *int64 `json:"remaining"`
			}
			if resp.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a) == nil && a.Remaining != nil {
				remaining.Store(*a.Remaining + 1)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProgressWriter returns a Config.Progress that prints one status line to
// w: redrawn in place a few times a second on a terminal, one line a
// second otherwise (a log or a pipe), and a final line at the end.
func ProgressWriter(w io.Writer) func(Progress) {
	tty := isTerminal(w)
	var lastPrinted time.Duration = -time.Second
	return func(p Progress) {
		line := formatProgress(p)
		switch {
		case tty && p.Final:
			fmt.Fprintf(w, "\r%s\x1b[K\n", line)
		case tty:
			fmt.Fprintf(w, "\r%s\x1b[K", line)
		case p.Final || p.Elapsed-lastPrinted >= time.Second:
			lastPrinted = p.Elapsed
			fmt.Fprintln(w, line)
		}
	}
}

func formatProgress(p Progress) string {
	s := fmt.Sprintf("%6.1fs  %9d req  %7.0f req/s  accepted %d  already %d  sold out %d",
		p.Elapsed.Seconds(), p.Requests, p.Throughput, p.Accepted, p.Already, p.SoldOut)
	if p.Rejected > 0 {
		s += fmt.Sprintf("  rejected %d", p.Rejected)
	}
	if p.Failed > 0 {
		s += fmt.Sprintf("  failed %d", p.Failed)
	}
	if p.RemainingKnown {
		s += fmt.Sprintf("  remaining %d", p.Remaining)
	}
	return s
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
