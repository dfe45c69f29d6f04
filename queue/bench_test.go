package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckilldev/seckill/queue"
)

// admitOne has uids join s's room (a sale of rate 1 a second) in that
// order, admits the first, and reads the room's state: the room is ready
// to answer polls from memory.
func admitOne(b *testing.B, r *queue.Room, s queue.Sale, uids ...int64) []queue.Ticket {
	b.Helper()
	ctx := context.Background()
	var tickets []queue.Ticket
	for _, uid := range uids {
		tk, err := r.Join(ctx, s, uid)
		if err != nil {
			b.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	adm, _, at := admitter(r, 100)
	for _, dt := range []time.Duration{0, time.Second} {
		if _, err := adm.Tick(ctx, s, at.Add(dt)); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	return tickets
}

// BenchmarkStatus: the CPU of a status poll, from the ticket and the room's
// state (no Redis: the state is read by Refresh beforehand), for a waiting
// buyer and for an admitted one (who gets a freshly signed pass).
func BenchmarkStatus(b *testing.B) {
	r, cmds, _ := newRoom(b)
	s := started(1)
	tickets := admitOne(b, r, s, 1, 2)
	for _, c := range []struct {
		name string
		tk   queue.Ticket
		uid  int64
		want string
	}{{"waiting", tickets[1], 2, "waiting"}, {"admitted", tickets[0], 1, "admitted"}} {
		b.Run(c.name, func(b *testing.B) {
			before := cmds.N()
			now := time.Now()
			for b.Loop() {
				st, err := r.Status(s, c.tk.Token, c.uid, now)
				if err != nil || st.State != c.want {
					b.Fatalf("%v %v, want %s", st.State, err, c.want)
				}
			}
			b.ReportMetric(float64(cmds.N()-before)/float64(b.N), "redis-cmds/op")
		})
	}
}

// BenchmarkVerifyPass: the CPU the grab adds to check a pass.
func BenchmarkVerifyPass(b *testing.B) {
	r, _, _ := newRoom(b)
	s := started(1)
	tk := admitOne(b, r, s, 7)[0]
	st, err := r.Status(s, tk.Token, 7, time.Now())
	if err != nil || st.Pass == "" {
		b.Fatalf("no pass: %v %v", st, err)
	}
	now := time.Now()
	for b.Loop() {
		if err := r.VerifyPass(s.ID, 7, st.Pass, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTickRound: one round of the admitter over 100 live sales with a
// room, one after the other (Tick in a loop) and as Run does it (TickAll).
func BenchmarkTickRound(b *testing.B) {
	r, _, _ := newRoom(b)
	sales := make([]queue.Sale, 100)
	for i := range sales {
		sales[i] = started(1000)
		if _, err := r.Join(context.Background(), sales[i], 1); err != nil {
			b.Fatal(err)
		}
	}
	adm, _, _ := admitter(r, 100)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			for _, s := range sales {
				if _, err := adm.Tick(ctx, s, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("TickAll", func(b *testing.B) {
		for b.Loop() {
			for _, err := range adm.TickAll(ctx, sales) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
