// Package testenv gives tests the real servers they need: the Redis,
// PostgreSQL and MySQL of the machine (addresses overridable by environment
// variables), fresh databases per test, and extra redis-server processes
// (standalone, replicated with a Sentinel, or a Redis Cluster) started by
// the test itself.
//
// A missing server skips the test on a developer's machine and fails it when
// CI=true, so CI can never go green by skipping.
//
// It is a module of its own, required by seckill and by the lock's tests
// (lock/tests) through replace directives: the lock's tests share it without
// depending on the application.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Defaults match the services of the CI machine; override with
// SECKILL_TEST_REDIS, SECKILL_TEST_POSTGRES and SECKILL_TEST_MYSQL.
const (
	DefaultRedis    = "127.0.0.1:6379"
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQL    = "mysql://root@127.0.0.1:3306/test"
)

// MissingHint ends the message of everything skipped for want of a server;
// internal/testall counts those skips by it.
const MissingHint = "(set CI=true to make this a failure)"

// Missing skips t, or fails it when CI=true: in CI every server must be up.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatalf("required server missing in CI: %s", msg)
	}
	t.Skipf("skipping: %s %s", msg, MissingHint)
}

func inCI() bool { return os.Getenv("CI") == "true" }

// RunExamplesNeeding runs m for the TestMain of a package whose runnable
// examples need a server (what names it, err is why it cannot be reached,
// nil when it answers). An example cannot skip itself: without the server
// the examples are left out of the run, as with -skip '^Example', with a
// message in the form of Missing's; when CI=true the run fails. It returns
// the exit code for os.Exit.
func RunExamplesNeeding(m *testing.M, what string, err error) int {
	if err == nil {
		return m.Run()
	}
	flag.Parse()
	skip := "^Example"
	if s := flag.Lookup("test.skip").Value.String(); s != "" {
		skip += "|" + s
	}
	if err := flag.Set("test.skip", skip); err != nil {
		panic(err)
	}
	msg := fmt.Sprintf("%s: %v", what, err)
	if inCI() {
		fmt.Printf("FAIL: examples not run: required server missing in CI: %s\n", msg)
		m.Run()
		return 1
	}
	fmt.Printf("skipping: the examples: %s %s\n", msg, MissingHint)
	return m.Run()
}

// A Server is one of the machine's servers the tests share.
type Server struct {
	Name string             // redis, postgres or mysql
	Env  string             // the variable that overrides Addr
	Addr string             // where the tests look for it: an address or URL
	Ping func(string) error // reaches the server at an address like Addr
}

// Servers lists the shared servers, with the environment's overrides
// applied.
func Servers() []Server {
	return []Server{
		{"redis", "SECKILL_TEST_REDIS", env("SECKILL_TEST_REDIS", DefaultRedis), PingRedis},
		{"postgres", "SECKILL_TEST_POSTGRES", env("SECKILL_TEST_POSTGRES", DefaultPostgres), PingPostgres},
		{"mysql", "SECKILL_TEST_MYSQL", env("SECKILL_TEST_MYSQL", DefaultMySQL), PingMySQL},
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// RedisAddr returns the address of the shared Redis, after checking that it
// answers. Tests must keep their keys apart with Prefix.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := env("SECKILL_TEST_REDIS", DefaultRedis)
	if err := PingRedis(addr); err != nil {
		Missing(t, "redis at %s: %v", addr, err)
	}
	return addr
}

// Prefix returns a key namespace unique to this test run.
func Prefix(t testing.TB) string {
	return "t" + RandHex(6)
}

// RandHex returns n random bytes as hex.
func RandHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// PingRedis speaks just enough RESP to know a Redis is at addr, so that this
// package does not pick a client library for its users.
func PingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// freshDatabase creates a database named after the test on the server that
// admin reaches, returns its name, and drops it when the test ends.
func freshDatabase(t testing.TB, admin *sql.DB, quote func(string) string) string {
	t.Helper()
	name := "seckill_test_" + RandHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+quote(name)); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quote(name)); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	return name
}

// WaitFor polls cond until it holds and returns the time it took, failing t
// after 30 s: a liveness bound for a loaded machine, not a timing assertion.
func WaitFor(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s: not reached in 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}
