package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Sentinel is a Redis Sentinel process started by a test. It watches one
// master under the name MasterName.
type Sentinel struct {
	Addr       string
	MasterName string
	cmd        *exec.Cmd
	log        *bytes.Buffer
}

// StartReplicated starts a master and a replica of it, waits until the
// replica is in sync, and returns both.
func StartReplicated(t testing.TB) (master, replica *RedisServer) {
	t.Helper()
	NeedBinary(t, "redis-cli")
	// No wait before a full sync (Redis waits 5s for more replicas to
	// share it).
	master = StartRedis(t, "--repl-diskless-sync-delay", "0")
	replica = StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(replica.Port), "info", "replication").Output()
		if err == nil && bytes.Contains(out, []byte("master_link_status:up")) {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not in sync: %v\n%s", replica.Addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartSentinel starts one Sentinel (quorum 1) watching master under the
// name "mymaster", with a one-second down-after period so that failovers
// are quick, waits until it knows the given number of the master's
// replicas, and stops it when the test ends.
func StartSentinel(t testing.TB, master *RedisServer, replicas int) *Sentinel {
	t.Helper()
	NeedBinary(t, "redis-server")
	NeedBinary(t, "redis-cli")
	port := FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	cfg := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor mymaster 127.0.0.1 %d 1
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
sentinel parallel-syncs mymaster 1
`, port, dir, master.Port)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(port), MasterName: "mymaster", log: &bytes.Buffer{}}
	s.cmd = exec.Command("redis-server", conf, "--sentinel")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sentinel: %v", err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "sentinel", "replicas", "mymaster").Output()
		if err == nil && countLines(string(out), "ip") >= replicas {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not see %d replicas: %v\n%s\n%s", s.Addr, replicas, err, out, s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitFailover waits until the Sentinel reports a master other than old
// (kill old to make it fail over) and returns the new master's address.
func (s *Sentinel) WaitFailover(t testing.TB, old *RedisServer) string {
	t.Helper()
	port := strings.TrimPrefix(s.Addr, "127.0.0.1:")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("redis-cli", "-p", port, "sentinel", "get-master-addr-by-name", s.MasterName).Output()
		fields := strings.Fields(string(out))
		if err == nil && len(fields) == 2 && fields[1] != strconv.Itoa(old.Port) {
			return fields[0] + ":" + fields[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover: %v\n%s\n%s", err, out, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countLines counts the lines of s equal to line (redis-cli prints one
// field name or value per line).
func countLines(s, line string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == line {
			n++
		}
	}
	return n
}
