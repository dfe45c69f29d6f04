package dashboard

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/seckilldev/seckill"
)

// History is how far back a page that opens is sent the figures, so that
// its charts do not start empty (a reload in the middle of a sale).
const History = time.Minute

// hub hands each encoded frame to every viewer. A viewer's queue holds a
// few frames; a viewer that falls further behind loses frames, so that
// neither the ticker nor the other viewers ever wait for it.
type hub struct {
	max     int
	keep    int           // frames of history
	wake    chan struct{} // told when the first viewer arrives
	mu      sync.Mutex
	viewers map[*viewer]struct{}
	closed  bool
	history []stamped // oldest first, at most keep
}

type viewer struct {
	frames chan []byte // SSE messages; closed when the hub closes
	admin  bool        // sent the admin's frames (see Frame.Errors)
}

type stamped struct {
	at    int64 // Unix ms
	msg   []byte
	admin []byte // the admin's message, nil when it is msg
}

// of returns the message for a viewer, admin or not.
func (s stamped) of(admin bool) []byte {
	if admin && s.admin != nil {
		return s.admin
	}
	return s.msg
}

func newHub(max int, tick time.Duration) *hub {
	return &hub{max: max, keep: int(History / tick), wake: make(chan struct{}, 1), viewers: map[*viewer]struct{}{}}
}

// join adds a viewer, an admin's or not, or refuses (false) when the hub
// is full or closed. It returns the history to send first.
func (h *hub) join(admin bool) (*viewer, []byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.viewers) >= h.max {
		return nil, nil, false
	}
	v := &viewer{frames: make(chan []byte, 4), admin: admin}
	h.viewers[v] = struct{}{}
	if len(h.viewers) == 1 {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return v, h.historyLocked(admin), true
}

// historyLocked encodes the recent frames, the admin's or not, as one
// "history" event whose data is a JSON array of them.
func (h *hub) historyLocked(admin bool) []byte {
	since := time.Now().Add(-History).UnixMilli()
	var b bytes.Buffer
	b.WriteString("event: history\ndata: [")
	n := 0
	for _, s := range h.history {
		if s.at < since {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(frameJSON(s.of(admin)))
		n++
	}
	b.WriteString("]\n\n")
	return b.Bytes()
}

func (h *hub) leave(v *viewer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.viewers, v)
}

func (h *hub) watched() bool { return h.count() > 0 }

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.viewers)
}

// publish sends one frame (its JSON, and the admin's, nil if the same) to
// every viewer that has room for it.
func (h *hub) publish(frame, admin []byte, at int64) {
	tick := func(frame []byte) []byte {
		msg := make([]byte, 0, len(frame)+32)
		msg = append(msg, "event: tick\ndata: "...)
		msg = append(msg, frame...)
		return append(msg, "\n\n"...)
	}
	st := stamped{at: at, msg: tick(frame)}
	if admin != nil {
		st.admin = tick(admin)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if len(h.history) == h.keep {
		h.history = append(h.history[:0], h.history[1:]...)
	}
	h.history = append(h.history, st)
	for v := range h.viewers {
		select {
		case v.frames <- st.of(v.admin):
		default: // behind: this frame is lost to it
		}
	}
}

// close ends every viewer's stream and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for v := range h.viewers {
		close(v.frames)
	}
	h.viewers = map[*viewer]struct{}{}
}

// frameJSON returns the JSON of a "tick" message.
func frameJSON(msg []byte) []byte {
	msg = bytes.TrimPrefix(msg, []byte("event: tick\ndata: "))
	return bytes.TrimSuffix(msg, []byte("\n\n"))
}

// events streams the frames to one page, as Server-Sent Events: a
// "history" event first, then a "tick" event per frame. The browser's
// EventSource reconnects by itself after the stream ends. A request with
// the admin token gets the admin's frames, which say why a read failed
// (a browser's EventSource sends no header: the page shows what anyone
// sees, and `curl -N -H "Authorization: Bearer ..."` the details).
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	v, history, ok := d.hub.join(d.isAdmin(r))
	if !ok {
		writeError(w, http.StatusServiceUnavailable, seckill.EUNAVAILABLE,
			"the dashboard has "+strconv.Itoa(d.cfg.MaxViewers)+" viewers, or is shutting down; try again later")
		return
	}
	defer d.hub.leave(v)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	send := func(b []byte) bool {
		// A page that stopped reading is dropped after a while instead of
		// holding its goroutine for ever.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(append([]byte("retry: 2000\n\n"), history...)) {
		return
	}
	for {
		select {
		case msg, ok := <-v.frames:
			if !ok || !send(msg) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
