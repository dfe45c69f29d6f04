package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
)

// redisServer is a throwaway redis-server for one run of the suite: no
// persistence, its working directory removed when it stops.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startRedis() (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "seckill-testall-redis")
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	var log bytes.Buffer
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--protected-mode", "no")
	s.cmd.Stdout, s.cmd.Stderr = &log, &log
	// its own process group: a Ctrl-C stops go test, and then testall
	// stops this server
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := testenv.PingRedis(s.addr)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not come up: %v\n%s", s.addr, err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}
