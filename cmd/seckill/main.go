// Command seckill runs the flash-sale service and its tools:
//
//	seckill serve    the HTTP API and the order worker
//	seckill worker   the order worker alone
//	seckill demo     a whole sale on embedded defaults, verified
//	seckill bench    a load generator that verifies
//	seckill token    bearer tokens for a service that verifies them
//	seckill version  the version and VCS revision of this binary
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `usage: seckill <command> [flags]

commands:
  serve    run the HTTP API and the order worker
  worker   run the order worker alone
  demo     run a whole sale on embedded defaults and verify it
  bench    load-test a service and verify it; --baseline (ratios to a trivial
           handler, measured with wrk when it is installed), --compare
  soak     a long run across API and worker processes with kills and pauses, verified
  token    mint bearer tokens (HS256) for a service run with --identity jwt
  version  print the version, VCS revision and Go version of this binary
           (also: seckill --version)
  help     show this text

Run "seckill <command> -h" for a command's flags. Every flag has an
environment twin, e.g. --redis and SECKILL_REDIS.

` + exitStatusHelp

// The exit statuses, the same for every command (each one's -h ends with
// exitStatusHelp).
const (
	exitOK         = 0 // done, -h, or (serve, worker) stopped by a signal
	exitFailed     = 1 // failed after it started
	exitNotStarted = 2 // could not start
)

const exitStatusHelp = `exit status:
  0  done; for serve and worker, stopped by SIGTERM or SIGINT, even while starting
  1  failed after it started: a check that did not hold, an error while serving
  2  could not start: a bad command, flag, environment variable or URL, a Redis or
     database that does not answer, an address in use, a file that cannot be read
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes a command line and returns the exit code: exitOK,
// exitFailed, or exitNotStarted for a startError (a bad command line, or a
// start that failed).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitNotStarted
	}
	quietRedis()
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case "soak":
		err = soakCmd(ctx, args[1:], stdout, stderr)
	case "token":
		err = tokenCmd(ctx, args[1:], stdout, stderr)
	case "baseline-server":
		err = baselineServerCmd(ctx, args[1:], stdout, stderr)
	case "worker":
		err = workerCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		err = versionCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "seckill: unknown command %q\n\n%s", args[0], usage)
		return exitNotStarted
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "seckill %s: %s\n", args[0], withoutRepeats(err.Error()))
	var se startError
	if errors.As(err, &se) {
		return exitNotStarted
	}
	return exitFailed
}

// withoutRepeats drops the lines of an error's text that an earlier line
// already said. pgx lists each connection attempt on a line of its own,
// and with sslmode=prefer (the default) a PostgreSQL that does not answer
// fails the TLS attempt and the plain one alike: the same dial error
// twice, for one address.
func withoutRepeats(text string) string {
	lines := strings.Split(text, "\n")
	seen := make(map[string]bool, len(lines))
	out := lines[:0]
	for _, l := range lines {
		if strings.TrimSpace(l) != "" && seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// startError is an error of a command that could not start: a bad
// command line (usagef), or a start that failed (notStarted). run exits
// with exitNotStarted for it, wherever it is in the error's chain.
type startError struct{ error }

func (e startError) Unwrap() error { return e.error }

// usagef is a bad command line: a flag's value, an environment variable,
// a URL.
func usagef(format string, args ...any) error { return startError{fmt.Errorf(format, args...)} }

// notStarted marks err (nil: nil) as the failure of a command's start:
// what it needs does not answer, or cannot be had.
func notStarted(err error) error {
	var se startError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return startError{err}
}
