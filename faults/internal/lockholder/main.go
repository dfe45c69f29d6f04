// Command lockholder is one client of the lock fault test: it runs
// critical sections under a lock of package lock, each reading the
// register and writing it plus one (with the lock's fencing token, if
// asked), and prints each critical section as a JSON line on stdout. Asked
// to, it stops itself with SIGSTOP in the middle of one critical section,
// after the read and before the write, and the test continues it once the
// lease has run out and others have taken the lock.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/faults/internal/register"
	"github.com/seckilldev/seckill/lock"
	goredislock "github.com/seckilldev/seckill/lock/goredis"
)

func main() {
	var (
		redisAddr = flag.String("redis", "127.0.0.1:6379", "Redis address of the lock")
		dbURL     = flag.String("db", "", "PostgreSQL URL of the register")
		prefix    = flag.String("prefix", "lockholder:", "lock key prefix")
		name      = flag.String("name", "register", "lock name")
		client    = flag.Int("client", 0, "this client's number")
		ops       = flag.Int("ops", 10, "critical sections to run")
		ttl       = flag.Duration("ttl", time.Second, "lease of the lock (no watchdog)")
		fenced    = flag.Bool("fenced", false, "write with the fencing token; the register refuses stale tokens")
		stopAt    = flag.Int("stop-at", 0, "SIGSTOP this process in the middle of critical section n (1-based); 0: never")
	)
	flag.Parse()
	if err := run(*redisAddr, *dbURL, *prefix, *name, *client, *ops, *ttl, *fenced, *stopAt); err != nil {
		fmt.Fprintf(os.Stderr, "lockholder %d: %v\n", *client, err)
		os.Exit(1)
	}
}

func run(redisAddr, dbURL, prefix, name string, client, ops int, ttl time.Duration, fenced bool, stopAt int) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks := lock.New(goredislock.New(rdb), lock.WithPrefix(prefix))
	defer locks.Close()
	reg, err := register.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer reg.Close()
	out := json.NewEncoder(os.Stdout)

	for i := 1; i <= ops; i++ {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := locks.Lock(wctx, name, lock.WithTTL(ttl))
		cancel()
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		op := register.Op{Client: client, Token: l.Token(), Call: time.Now().UnixNano()}
		if op.Read, err = reg.Read(ctx); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if i == stopAt {
			// The test sees this line, waits until the lease has run out and
			// others have written, and sends SIGCONT.
			if err := out.Encode(map[string]any{"event": "stopping", "client": client, "at": time.Now().UnixNano()}); err != nil {
				return err
			}
			// The stop takes effect asynchronously: without waiting for the
			// SIGCONT, the write below could leave before the process stops.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
				return err
			}
			<-cont
			signal.Stop(cont)
		}
		fence := int64(0)
		if fenced {
			fence = op.Token
		}
		if op.Wrote, err = reg.Write(ctx, op.Read+1, fence); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		op.Return = time.Now().UnixNano()
		// ErrNotHeld after a pause past the lease is expected.
		_ = l.Unlock(ctx)
		if err := out.Encode(op); err != nil {
			return err
		}
	}
	return nil
}
