package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// buildBinary compiles cmd/seckill once per test run, into binDir.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "seckill-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "seckill")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// binDir holds the binary (35 MB) once a test built it; TestMain removes it
// after the last test.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is a seckill process started by a test.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, once done is closed
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SECKILL_LOG_LEVEL=warn")
	stderr, _ := cmd.StderrPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	// The reader may still be logging the process's last lines when done
	// closes and the test ends: its log drops them after the cleanup below.
	logs := newTestLog(t)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Logf("%s: %s", args[0], sc.Text())
		}
	}()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
	}()
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.done })
	return p
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// waitHTTP waits until url answers.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMultiProcess: two API instances and a worker that is killed and
// restarted during the sale, on one Redis and one PostgreSQL. A crowd with
// repeated clicks; at the end: confirmed orders = stock, no duplicate, every
// answered order confirmed, remaining 0 in Redis and in the database.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	redisAddr := testenv.RedisAddr(t)
	dbURL := testenv.PostgresURL(t)
	prefix := testenv.Prefix(t)
	stockN, users, clicks := int64(300), int64(3000), 2
	if n, err := strconv.ParseInt(os.Getenv("SECKILL_TEST_MP_USERS"), 10, 64); err == nil && n > 0 {
		// A larger run for measurements: stock a tenth of the users.
		users, stockN = n, n/10
	}
	common := []string{"--redis", "redis://" + redisAddr, "--db", dbURL, "--redis-prefix", prefix}

	var apis []string
	var apiProcs []*proc
	for range 2 {
		port := testenv.FreePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		apiProcs = append(apiProcs, startProc(t, append([]string{"serve", "--no-worker", "--listen", addr, "--admin-token", testAdminToken}, common...)...))
		apis = append(apis, "http://"+addr)
	}
	for _, a := range apis {
		waitHTTP(t, a+"/healthz")
	}
	in := &instance{t: t, url: apis[0], token: testAdminToken, client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
	id := in.createActivity(stockN, 0)

	workerArgs := func(n int) []string {
		return append([]string{"worker", "--claim-idle", "1s", "--batch", "20", "--consumer", fmt.Sprintf("w%d", n)}, common...)
	}
	w := startProc(t, workerArgs(0)...)

	// The crowd: every user clicks `clicks` times, spread over both APIs.
	var mu sync.Mutex
	answered := map[int64]map[string]bool{}
	var sent, accepted atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &instance{t: t, url: apis[g%2], client: in.client}
			for uid := range work {
				r := c.grab(id, uid)
				sent.Add(1)
				switch r.status {
				case 200, 202:
					accepted.Add(1)
					mu.Lock()
					if answered[uid] == nil {
						answered[uid] = map[string]bool{}
					}
					answered[uid][r.body["order_id"].(string)] = true
					mu.Unlock()
				case 409:
				default:
					t.Errorf("grab: %d %v", r.status, r.body)
				}
			}
		}()
	}
	// Kill the worker twice while the crowd runs, restarting it each time
	// under a new name (its pending orders must be claimed).
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for n := 1; n <= 2; n++ {
			for accepted.Load() < int64(n)*stockN/3 {
				time.Sleep(5 * time.Millisecond)
			}
			w.signal(syscall.SIGKILL)
			<-w.done
			w = startProc(t, workerArgs(n)...)
		}
	}()
	for range clicks {
		for uid := int64(1); uid <= users; uid++ {
			work <- uid
		}
	}
	close(work)
	wg.Wait()
	<-killed

	// Wait for the stream to drain.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	e := stock.New(rdb, stock.Config{Prefix: prefix})
	defer e.Close()
	a := seckill.Activity{ID: id}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := e.Stats(context.Background(), a)
		if err == nil && st.Backlog() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not drained: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// SIGTERM: every process stops cleanly, exit code 0.
	w.signal(syscall.SIGTERM)
	<-w.done
	if w.err != nil {
		t.Errorf("worker after SIGTERM: %v, want exit 0", w.err)
	}
	for _, p := range apiProcs {
		p.signal(syscall.SIGTERM)
		<-p.done
		if p.err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit 0", p.err)
		}
	}

	db, err := sqlDB(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var confirmed, dups, remaining int64
	if err := db.QueryRow(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status IN ('confirmed', 'paid')`, id).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM (SELECT user_id FROM orders WHERE activity_id = $1 AND status IN ('confirmed', 'paid') GROUP BY user_id HAVING count(*) > 1) d`, id).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT remaining FROM activities WHERE id = $1`, id).Scan(&remaining); err != nil {
		t.Fatal(err)
	}
	redisRemaining, err := e.Remaining(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d grabs, %d accepted replies, %d buyers; confirmed %d, duplicates %d, remaining db %d redis %d",
		sent.Load(), accepted.Load(), len(answered), confirmed, dups, remaining, redisRemaining)
	if confirmed != stockN || dups != 0 || remaining != 0 || redisRemaining != 0 {
		t.Errorf("invariants broken: confirmed %d (want %d), duplicates %d, remaining db %d redis %d",
			confirmed, stockN, dups, remaining, redisRemaining)
	}
	var ids []string
	for uid, set := range answered {
		if len(set) != 1 {
			t.Errorf("user %d was told of %d orders", uid, len(set))
		}
		for oid := range set {
			ids = append(ids, oid)
		}
	}
	var answeredConfirmed int64
	q := `SELECT count(*) FROM orders WHERE id IN (` + strings.Join(ids, ",") + `)`
	if len(ids) > 0 {
		if err := db.QueryRow(q).Scan(&answeredConfirmed); err != nil {
			t.Fatal(err)
		}
	}
	if answeredConfirmed != int64(len(ids)) || int64(len(ids)) != stockN {
		t.Errorf("answered orders: %d, confirmed among them %d; want %d and %d", len(ids), answeredConfirmed, stockN, stockN)
	}
}

// TestStoppedWhileStarting: a serve or worker told to stop (SIGTERM) while
// it still connects to its database exits with status 0: a supervisor that
// stops a starting process sees no failure (the soak's shutdown once failed
// on "worker0: exit status 1" for a worker restarted a moment before).
func TestStoppedWhileStarting(t *testing.T) {
	// a database that accepts connections and never answers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	db := "postgres://postgres@" + ln.Addr().String() + "/test?sslmode=disable"
	for _, cmd := range []string{"serve", "worker"} {
		t.Run(cmd, func(t *testing.T) {
			args := []string{cmd, "--db", db, "--redis", redisURL(t), "--redis-prefix", testenv.Prefix(t)}
			if cmd == "serve" {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			p := startProc(t, args...)
			time.Sleep(500 * time.Millisecond) // connecting: the database never answers
			p.signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Fatal("still running 30 s after SIGTERM")
			}
			if p.err != nil {
				t.Fatalf("%s stopped while starting: %v, want exit status 0", cmd, p.err)
			}
		})
	}
}
