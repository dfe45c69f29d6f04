package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/queue"
)

// The waiting room's headers: a buyer shows the ticket with each status
// poll, and the pass with the grab.
const (
	ticketHeader    = "X-Queue-Ticket"
	passHeader      = "X-Queue-Pass"
	challengeHeader = "X-Queue-Challenge"
	nonceHeader     = "X-Queue-Nonce"
)

// queueRequest is an activity's waiting room, as created and shown.
type queueRequest struct {
	// Rate is the most buyers admitted a second.
	Rate int `json:"rate"`
	// Hold, if not 0, also bounds the buyers admitted and not yet bought
	// by Hold for each unit left.
	Hold int `json:"hold"`
}

// WithQueue serves the waiting rooms of the sales that have one with r.
func WithQueue(r *queue.Room) Option { return func(s *Server) { s.room = r } }

// queueSale returns the room's view of activity id, which must have a
// waiting room; from this instance's cache of the activity (no Redis).
func (s *Server) queueSale(r *http.Request) (queue.Sale, int64, error) {
	id, err := pathID(r, "activity")
	if err != nil {
		return queue.Sale{}, 0, err
	}
	c, err := s.callerOf(r.Context(), netHeader(r.Header))
	if err != nil {
		return queue.Sale{}, 0, err
	}
	if c.Admin {
		return queue.Sale{}, 0, seckill.Errorf(seckill.EINVALID, "the admin does not queue: send the buyer's identity")
	}
	a, err := s.sale.CachedActivity(r.Context(), id)
	if err != nil {
		return queue.Sale{}, 0, err
	}
	if a.QueueRate == 0 {
		return queue.Sale{}, 0, seckill.Errorf(seckill.EINVALID, "activity %d has no waiting room: grab it directly", id)
	}
	if s.room == nil {
		return queue.Sale{}, 0, seckill.Errorf(seckill.EUNAVAILABLE, "this sale has a waiting room, and this instance runs none")
	}
	return queue.SaleOf(a), c.UserID, nil
}

// joinQueue gives the buyer a ticket of the sale's waiting room: the same
// one each time (200 then, 201 the first time is not told apart: the
// ticket is the answer).
func (s *Server) joinQueue(w http.ResponseWriter, r *http.Request) {
	sale, uid, err := s.queueSale(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.room.VerifyWork(sale.ID, uid, r.Header.Get(challengeHeader), r.Header.Get(nonceHeader), time.Now()); err != nil {
		s.fail(w, r, err)
		return
	}
	tk, err := s.room.Join(r.Context(), sale, uid)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Ticket  string `json:"ticket"`
		Drawn   bool   `json:"drawn"`
		Arrival int64  `json:"arrival,omitempty"`
	}{tk.Token, tk.Drawn, tk.Arrival})
}

// queueChallenge gives the buyer a challenge to answer with a proof of
// work when joining (serve --queue-work-bits); "" and 0 bits when the room
// asks none.
func (s *Server) queueChallenge(w http.ResponseWriter, r *http.Request) {
	sale, uid, err := s.queueSale(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c, bits := s.room.Challenge(sale.ID, uid, time.Now())
	writeJSON(w, http.StatusOK, struct {
		Challenge string `json:"challenge"`
		Bits      int    `json:"bits"`
	}{c, bits})
}

// queueStatus answers a poll: waiting (how many ahead, about how long),
// admitted (with a pass for the grab), sold out or ended; and when to ask
// again (Retry-After, and retry_after_ms to the millisecond). It asks
// nothing of Redis.
func (s *Server) queueStatus(w http.ResponseWriter, r *http.Request) {
	sale, uid, err := s.queueSale(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ticket := r.Header.Get(ticketHeader)
	if ticket == "" {
		ticket = r.URL.Query().Get("ticket")
	}
	if ticket == "" {
		s.fail(w, r, seckill.Errorf(queue.ETICKET, "send the ticket that joining gave, in the %s header", ticketHeader))
		return
	}
	st, err := s.room.Status(sale, ticket, uid, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body := struct {
		State        string     `json:"state"`
		Ahead        *int64     `json:"ahead,omitempty"`
		WaitMS       int64      `json:"wait_ms"`
		Pass         string     `json:"pass,omitempty"`
		PassExpires  *time.Time `json:"pass_expires_at,omitempty"`
		RetryAfterMS int64      `json:"retry_after_ms"`
	}{State: st.State, WaitMS: st.Wait.Milliseconds(), Pass: st.Pass, RetryAfterMS: st.RetryAfter.Milliseconds()}
	if st.State == "waiting" && st.Ahead >= 0 {
		body.Ahead = &st.Ahead
	}
	if st.Pass != "" {
		exp := st.PassExpires.UTC()
		body.PassExpires = &exp
	}
	if st.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(max(int64(st.RetryAfter.Round(time.Second)/time.Second), 1), 10))
	}
	writeJSON(w, http.StatusOK, body)
}
