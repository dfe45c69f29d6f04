// Package cluster runs a seckill deployment as real processes on loopback
// for the fault suite and the soak: API instances (`seckill serve
// --no-worker`) and order workers (`seckill worker`) on one Redis and one
// database, each of which can be killed, paused, resumed and restarted; a
// crowd that grabs through every API at once; and the invariant check of
// package check, wired to what the crowd was told.
package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one process started by the cluster.
type Proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, once done is closed

	mu      sync.Mutex
	stopped bool // SIGSTOP sent, no SIGCONT since
}

// Start starts bin with args; each line the process writes to stderr
// goes to logf with the process name. A process outlives nothing: it gets
// SIGKILL if the parent dies.
func Start(bin, name string, args []string, logf func(name, line string)) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	out := &lineWriter{emit: func(line string) {
		if logf != nil {
			logf(name, line)
		}
	}}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.flush()
		close(p.done)
	}()
	return p, nil
}

// Name returns the process's name in logs and tables.
func (p *Proc) Name() string { return p.name }

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns how the process ended (nil: exit code 0); only meaningful
// once Done is closed.
func (p *Proc) Err() error { return p.err }

// Kill sends SIGKILL (kill -9) and waits until the process is gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
}

// Stop sends SIGSTOP: the process freezes on the spot, with its
// connections open and whatever it holds held.
func (p *Proc) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("cluster: SIGSTOP %s: %w", p.name, err)
	}
	p.stopped = true
	return nil
}

// Cont sends SIGCONT to a stopped process.
func (p *Proc) Cont() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("cluster: SIGCONT %s: %w", p.name, err)
	}
	p.stopped = false
	return nil
}

// State returns the process state the kernel reports (/proc/<pid>/stat):
// "R" running, "S" sleeping, "T" stopped, "Z" zombie...; "" if unknown.
func (p *Proc) State() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 > len(b) {
		return ""
	}
	return string(b[i+2 : i+3])
}

// Stopped reports whether the process was stopped and not continued.
func (p *Proc) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// ErrTimeout is returned by Term when the process did not exit in time.
var ErrTimeout = errors.New("cluster: process did not exit in time")

// Term sends SIGTERM and waits up to timeout for the process to exit; then
// it kills it and returns ErrTimeout. It returns the exit error otherwise
// (nil for exit code 0).
func (p *Proc) Term(timeout time.Duration) error {
	if p.Stopped() {
		_ = p.Cont()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%w: %s after %s", ErrTimeout, p.name, timeout)
	}
}

// lineWriter calls emit once per complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf.Next(i + 1))
		w.emit(line[:len(line)-1])
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.emit(w.buf.String())
		w.buf.Reset()
	}
}
