package testenv

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server process started by a test.
type RedisServer struct {
	Addr string
	Port int
	Dir  string // working directory (AOF, RDB, nodes.conf)
	args []string
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// StartRedis starts a redis-server on a free loopback port with no
// persistence unless args say otherwise (e.g. "--appendonly", "yes"), and
// stops it when the test ends.
func StartRedis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	NeedBinary(t, "redis-server")
	port := FreePort(t)
	if slices.Contains(args, "--cluster-enabled") {
		port = freeClusterPort(t)
	}
	s := &RedisServer{Port: port, Dir: t.TempDir(), args: args}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Kill() })
	return s
}

// Start (re)starts the process on the same port and directory and waits until
// it answers PING.
func (s *RedisServer) Start() error {
	base := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}
	s.log = &bytes.Buffer{}
	s.cmd = exec.Command("redis-server", append(base, s.args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := PingRedis(s.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not come up: %v\n%s", s.Addr, err, s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Signal sends sig (e.g. SIGSTOP, SIGCONT) to the process.
func (s *RedisServer) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redis-server on %s is not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}

// NeedBinary skips t (fails it when CI=true) when the program name, a
// server or its client, is not on PATH: a missing binary is a missing server.
func NeedBinary(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		Missing(t, "%s binary: %v", name, err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freeClusterPort returns a port p such that p and its cluster bus port
// p+10000 were both free a moment ago.
func freeClusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := 20000 + mrand.IntN(30000)
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}
