package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/faults/internal/register"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	goredislock "github.com/seckilldev/seckill/lock/goredis"
)

var lockholderBinary = sync.OnceValues(func() (string, error) {
	return build("github.com/seckilldev/seckill/faults/internal/lockholder", "lockholder")
})

// history collects the critical sections of several clients.
type history struct {
	mu  sync.Mutex
	ops []register.Op
}

func (h *history) add(op register.Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// since counts the operations of clients other than c that began after t.
func (h *history) since(c int, t int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, op := range h.ops {
		if op.Client != c && op.Call > t {
			n++
		}
	}
	return n
}

func (h *history) all() []register.Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]register.Op(nil), h.ops...)
}

// freshRegister makes the register in a fresh PostgreSQL database.
func freshRegister(t *testing.T) (*register.Register, string) {
	t.Helper()
	url := testenv.PostgresURL(t)
	reg, err := register.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := reg.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	return reg, url
}

// judge checks the history and logs the I6 table.
func judge(t *testing.T, reg *register.Register, h *history, faults *cluster.Counter) register.Verdict {
	t.Helper()
	final, err := reg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ops := h.all()
	v := register.Check(ops, final, 30*time.Second)
	if v.Clients > register.MaxClients {
		t.Fatalf("history of %d clients: keep it to %d or fewer", v.Clients, register.MaxClients)
	}
	var b strings.Builder
	_ = faults.WriteTable(&b, "faults injected")
	_ = v.WriteTable(&b)
	t.Logf("%s\n%s", t.Name(), b.String())
	return v
}

// TestLockHolderPausedPastTTL: four processes take turns in a critical
// section under one lock (single Redis, 1s lease, no watchdog): read the
// register, write it plus one. One of them stops itself with SIGSTOP in
// the middle of a critical section, after its read; the test continues
// it only after its lease has run out and the others have written. Its
// write then comes from a holder that no longer holds the lock. Without
// the fencing check (the control) the checker must report the violation:
// a history that is not linearizable and a lost update. With the fencing
// token checked by the register, the stale write is refused: 0 violations.
func TestLockHolderPausedPastTTL(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		name := "without fencing (control)"
		if fenced {
			name = "with fencing"
		}
		t.Run(name, func(t *testing.T) {
			v := pausedHolder(t, fenced)
			switch {
			case !fenced && v.OK():
				t.Errorf("control: the checker missed the stale holder's write (%+v)", v)
			case !fenced && v.Linearizable != porcupine.Illegal:
				t.Errorf("control: porcupine says %s, want %s", v.Linearizable, porcupine.Illegal)
			case fenced && !v.OK():
				t.Errorf("mutual exclusion violated with fencing: %+v", v)
			case fenced && v.Refused == 0:
				t.Errorf("the paused holder's stale write was not refused: %+v", v)
			}
		})
	}
}

func pausedHolder(t *testing.T, fenced bool) register.Verdict {
	if testing.Short() {
		t.Skip("runs processes")
	}
	bin, err := lockholderBinary()
	if err != nil {
		t.Fatal(err)
	}
	reg, dbURL := freshRegister(t)
	redisAddr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t) + ":lock:"
	const clients, ops = 4, 12
	ttl := time.Second
	var h history
	var faults cluster.Counter
	stopping := make(chan int64, 1)
	var procs []*cluster.Proc
	start := func(c int) {
		args := []string{"-redis", redisAddr, "-db", dbURL, "-prefix", prefix, "-client", strconv.Itoa(c),
			"-ops", strconv.Itoa(ops), "-ttl", ttl.String(), "-fenced=" + strconv.FormatBool(fenced)}
		if c == 0 {
			args = append(args, "-stop-at", "3")
		}
		p, err := cluster.Start(bin, fmt.Sprintf("holder%d", c), args, func(name, line string) {
			var ev struct {
				Event string `json:"event"`
				At    int64  `json:"at"`
			}
			var op register.Op
			switch {
			case json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "stopping":
				stopping <- ev.At
			case json.Unmarshal([]byte(line), &op) == nil && op.Call > 0:
				h.add(op)
			default:
				t.Logf("%s: %s", name, line)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		procs = append(procs, p)
	}
	// holder0 first, so that the others surely run while it is stopped.
	start(0)
	var at int64
	select {
	case at = <-stopping:
	case <-time.After(time.Minute):
		t.Fatal("holder0 never reached its pause")
	}
	if !cluster.Wait(context.Background(), 10*time.Second, func() bool { return procs[0].State() == "T" }) {
		t.Fatalf("holder0 is not stopped: state %q", procs[0].State())
	}
	for c := 1; c < clients; c++ {
		start(c)
	}
	faults.Add("lock holder SIGSTOP")
	// Continue it once its lease has surely run out and others have held
	// the lock and written.
	ok := cluster.Wait(context.Background(), time.Minute, func() bool {
		return time.Since(time.Unix(0, at)) > ttl+200*time.Millisecond && h.since(0, at) >= 2
	})
	if !ok {
		t.Fatalf("the other holders did not take the lock while holder0 was paused")
	}
	t.Logf("holder0 paused for %s past its read; %d critical sections of others meanwhile",
		time.Since(time.Unix(0, at)).Round(time.Millisecond), h.since(0, at))
	if err := procs[0].Cont(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		select {
		case <-p.Done():
			if p.Err() != nil {
				t.Errorf("%s: %v", p.Name(), p.Err())
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s did not finish", p.Name())
		}
	}
	if n := len(h.all()); n != clients*ops {
		t.Fatalf("history has %d critical sections, want %d", n, clients*ops)
	}
	return judge(t, reg, &h, &faults)
}

// redlockClient is one client process of the Redlock test, in this
// process: its own connections to the three nodes.
func redlockClient(t *testing.T, nodes []*testenv.RedisServer, prefix string) *lock.Client {
	t.Helper()
	var rs []lock.Redis
	for _, n := range nodes {
		// No retries and short timeouts: a node that is down must cost
		// little of the lease, as the Redlock algorithm asks. One dial a
		// connection (go-redis dials five times, 100 ms apart): a call
		// that Lock no longer awaits must not reach a node restarted
		// meanwhile and take the lock there behind the test's back.
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		rs = append(rs, goredislock.New(rdb))
	}
	c := lock.NewRedlock(rs, lock.WithPrefix(prefix))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedlockNodeRestart: Redlock over three redis-server processes
// without persistence, 6s leases. Client A holds the lock on exactly two
// nodes (the third was down when it acquired). In the middle of A's
// critical section one of A's two nodes is killed with kill -9:
//
//   - restarted at once, empty, it lets client B take the lock while A's
//     lease still runs (B needs two nodes: the restarted one and the one A
//     missed). A, a well-behaved holder that writes only before its
//     validity ends, writes after B: two holders at once. The checker must
//     report it (this is the known hazard of Redlock without persistence,
//     and the control of this test);
//   - restarted only after the lease (the delayed restart the Redis
//     documentation asks for), B cannot take the lock before A's lease ends
//     on the surviving node: 0 violations.
//
// Clients before and after the fault show the lock working normally.
func TestRedlockNodeRestart(t *testing.T) {
	for _, delayed := range []bool{false, true} {
		name := "restarted at once (control)"
		if delayed {
			name = "restarted after the TTL"
		}
		t.Run(name, func(t *testing.T) {
			v := redlockRestart(t, delayed)
			switch {
			case !delayed && v.OK():
				t.Errorf("control: the checker missed two holders at once (%+v)", v)
			case !delayed && v.Linearizable != porcupine.Illegal:
				t.Errorf("control: porcupine says %s, want %s", v.Linearizable, porcupine.Illegal)
			case delayed && !v.OK():
				t.Errorf("mutual exclusion violated although the node came back after the TTL: %+v", v)
			}
		})
	}
}

func redlockRestart(t *testing.T, delayed bool) register.Verdict {
	if testing.Short() {
		t.Skip("runs processes")
	}
	nodes := []*testenv.RedisServer{testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)}
	reg, _ := freshRegister(t)
	prefix := testenv.Prefix(t) + ":lock:"
	const name = "register"
	// Long enough that, on a loaded machine, B takes the lock within A's
	// lease in the control (node 1 restarted, B's acquisition, its write):
	// with 2 s, B was sometimes too late to overlap A, and the control saw
	// nothing to report.
	lease := 6 * time.Second
	clients := []*lock.Client{redlockClient(t, nodes, prefix), redlockClient(t, nodes, prefix), redlockClient(t, nodes, prefix)}
	ctx := context.Background()
	var h history
	var faults cluster.Counter

	// cs runs one critical section of client c under l: read, wait, write
	// if the lease it was granted still runs by this process's clock. (The
	// library also drops a Redlock hold whose quorum it sees lost, and A's
	// ValidUntil would then end the section early; the lease granted is
	// what Redlock's promise is about, and what a restart without
	// persistence breaks.)
	cs := func(c int, l *lock.Lock, wait func()) error {
		op := register.Op{Client: c, Token: l.Token(), Call: time.Now().UnixNano()}
		valid := l.ValidUntil()
		var err error
		if op.Read, err = reg.Read(ctx); err != nil {
			return err
		}
		if wait != nil {
			wait()
		}
		if time.Now().Before(valid) {
			if op.Wrote, err = reg.Write(ctx, op.Read+1, 0); err != nil {
				return err
			}
		}
		op.Return = time.Now().UnixNano()
		h.add(op)
		return nil
	}
	// rounds: every client runs n critical sections, concurrently.
	rounds := func(n int) {
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for range n {
					wctx, cancel := context.WithTimeout(ctx, time.Minute)
					l, err := clients[c].Lock(wctx, name, lock.WithTTL(lease))
					cancel()
					if err != nil {
						t.Errorf("client %d: lock: %v", c, err)
						return
					}
					if err := cs(c, l, nil); err != nil {
						t.Errorf("client %d: %v", c, err)
					}
					_ = l.Unlock(ctx)
				}
			})
		}
		wg.Wait()
	}
	rounds(4)

	// A acquires while node 2 is down: it holds nodes 0 and 1 only. It
	// waits for that: node 1 may still be held by a hold of the rounds
	// (Lock and Unlock return once a quorum answered: the call to the third
	// node may still be on its way; an acquisition that lands after the
	// Unlock holds the node for a lease, a liveness gap of the library),
	// seen on a loaded machine as "node 1: lock: not obtained".
	nodes[2].Kill()
	actx, cancelA := context.WithTimeout(ctx, 3*lease)
	la, err := clients[0].Lock(actx, name, lock.WithTTL(lease))
	cancelA()
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if tok := la.Tokens(); len(tok) != 3 || tok[0] == 0 || tok[1] == 0 || tok[2] != 0 {
		t.Fatalf("A holds the nodes %v, want 0 and 1", tok)
	}
	aValid := la.ValidUntil()
	if err := nodes[2].Start(); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan struct{})
	var bErr error
	restarted := make(chan error, 1)
	err = cs(0, la, func() {
		nodes[1].Kill()
		faults.Add("redlock node kill -9")
		if delayed {
			go func() {
				time.Sleep(lease + 200*time.Millisecond)
				restarted <- nodes[1].Start()
			}()
		} else {
			restarted <- nodes[1].Start()
		}
		faults.Add("redlock node restart without persistence")
		// B dials afresh, as a process that starts now would: its first
		// request to the restarted node finds a live connection (the
		// test's clients do not retry a request on a broken one).
		b := clients[1]
		if !delayed {
			b = redlockClient(t, nodes, prefix)
		}
		go func() {
			defer close(bDone)
			wctx, cancel := context.WithTimeout(ctx, 4*lease)
			defer cancel()
			lb, err := b.Lock(wctx, name, lock.WithTTL(lease))
			if err != nil {
				bErr = fmt.Errorf("B: lock: %w", err)
				return
			}
			if bErr = cs(1, lb, nil); bErr == nil {
				_ = lb.Unlock(ctx)
			}
		}()
		// A's critical section lasts until B is done or A's lease nearly
		// ends, whichever comes first.
		select {
		case <-bDone:
		case <-time.After(time.Until(aValid.Add(-200 * time.Millisecond))):
		}
	})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restart node: %v", err)
	}
	if err := la.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		t.Logf("A: unlock: %v", err)
	}
	<-bDone
	if bErr != nil {
		t.Fatal(bErr)
	}
	rounds(2)
	return judge(t, reg, &h, &faults)
}
