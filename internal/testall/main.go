// Command testall runs the test suite as the README says:
//
//	go run ./internal/testall [go test flags] [./packages]
//
// It checks which of the servers the tests share answer (the addresses of
// internal/testenv, with their SECKILL_TEST_* overrides) and whether the
// redis-server and redis-cli binaries are on PATH; starts a throwaway
// redis-server on a free port when no Redis answers and the binary is there,
// and stops it afterwards; runs go test -race -count=1 ./... (without -race
// when cgo is off, since the race detector needs a C compiler) in the main
// module and in each module nested in it (the lock library, its adapters
// and tests, and the test helpers of internal/testenv, which ./... does not
// reach; a package pattern inside one, such as ./lock/tests/..., runs in
// that module), printing go test's output as go test prints it (all of it
// with -v); and ends with one summary: what was missing, how many tests
// were skipped for want of it, and what to install or start. It exits with
// the first failing go test's exit code.
//
// A plain go test ./... works too: it only lacks the summary, since go test
// shows nothing of a passing package.
package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/seckilldev/seckill/internal/testenv"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// server is what was found of one server the tests need.
type server struct {
	testenv.Server
	err     error  // why it does not answer; nil when it does
	started string // the address of the throwaway redis-server run for it
}

func run(args []string, stdout, stderr io.Writer) int {
	var servers []*server
	for _, s := range testenv.Servers() {
		servers = append(servers, &server{Server: s, err: s.Ping(s.Addr)})
	}
	binaries := map[string]error{}
	for _, name := range []string{"redis-server", "redis-cli"} {
		_, binaries[name] = exec.LookPath(name)
	}
	env := os.Environ()
	for _, rs := range servers {
		if rs.Name != "redis" || rs.err == nil || binaries["redis-server"] != nil {
			continue
		}
		srv, err := startRedis()
		if err != nil {
			fmt.Fprintf(stderr, "testall: %v\n", err)
			continue
		}
		defer srv.stop()
		rs.started = srv.addr
		env = append(env, rs.Env+"="+srv.addr)
		fmt.Fprintf(stdout, "testall: no Redis at %s; started a throwaway redis-server on %s for this run\n", rs.Addr, srv.addr)
	}

	race, raceNote := raceSupported()
	goArgs := []string{"test", "-json"}
	if race {
		goArgs = append(goArgs, "-race")
	} else {
		fmt.Fprintf(stdout, "testall: running without -race: %s\n", raceNote)
	}
	// go test's own bound is 10 minutes a package: cmd/seckill's tests
	// took 8.7 of them on a 2-core machine running two suites at once.
	// A test that hangs still ends in a panic with every goroutine's
	// stack, within CI's 20 minutes; a -timeout in args overrides it.
	goArgs = append(goArgs, "-count=1", "-timeout=15m")
	// the main module, then the nested ones (the lock library, the test
	// helpers): go test ./... does not cross into a module of its own
	flags, runs := plan(args, nestedModules(repoRoot()))
	goArgs = append(goArgs, flags...)

	// An interrupt from the terminal reaches go test too; wait for it to
	// end, then stop the throwaway Redis. A SIGTERM for us alone is passed on.
	var current atomic.Pointer[exec.Cmd]
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for sig := range sigs {
			if cmd := current.Load(); sig == syscall.SIGTERM && cmd != nil {
				_ = cmd.Process.Signal(sig)
			}
		}
	}()
	rep := newReport(stdout, verbose(args))
	var shown []string
	code := 0
	for _, r := range runs {
		a := append(slices.Clone(goArgs), r.pkgs...)
		line := "go " + strings.Join(slicesWithout(a, "-json"), " ")
		if r.dir != "." {
			line = "(cd " + r.dir + " && " + line + ")"
		}
		shown = append(shown, line)
		fmt.Fprintf(stdout, "testall: %s\n", line)
		if r.dir == "." && slices.Equal(r.pkgs, []string{"./..."}) {
			a = append(slices.Clone(goArgs), slowFirst(r.dir)...)
		}

		cmd := exec.Command("go", a...)
		cmd.Dir, cmd.Env, cmd.Stderr = r.dir, env, stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintf(stderr, "testall: %v\n", err)
			return 1
		}
		current.Store(cmd)
		rep.read(out)
		if c := exitCode(cmd.Wait()); c != 0 && code == 0 {
			code = c
		}
		current.Store(nil)
	}
	signal.Stop(sigs)

	writeSummary(stdout, summary{
		command:  strings.Join(shown, "; "),
		code:     code,
		servers:  servers,
		binaries: binaries,
		race:     race,
		raceNote: raceNote,
		report:   rep,
	})
	return code
}

// raceSupported reports whether go test -race can work here: the race
// detector needs cgo, which the go command turns off when it finds no C
// compiler.
func raceSupported() (bool, string) {
	out, err := exec.Command("go", "env", "CGO_ENABLED").Output()
	if err != nil {
		return false, fmt.Sprintf("go env CGO_ENABLED: %v", err)
	}
	if strings.TrimSpace(string(out)) != "1" {
		cc := "no C compiler found (sudo apt-get install gcc)"
		if os.Getenv("CGO_ENABLED") == "0" {
			cc = "CGO_ENABLED=0"
		}
		return false, "the race detector needs cgo, and cgo is off: " + cc
	}
	return true, ""
}

func verbose(args []string) bool {
	for _, a := range args {
		switch a {
		case "-v", "--v", "-v=true", "--v=true":
			return true
		}
	}
	return false
}

func slicesWithout(s []string, drop string) []string {
	var out []string
	for _, x := range s {
		if x != drop {
			out = append(out, x)
		}
	}
	return out
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	}
	return 1
}

// redacted shows a server's address without its password.
func redacted(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.User != nil {
		return u.Redacted()
	}
	return addr
}

// firstLine keeps error messages of drivers to one line.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimSpace(s)
}
