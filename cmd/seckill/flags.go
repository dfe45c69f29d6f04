package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/seckilldev/seckill/stock"
)

// flagSet is a flag.FlagSet whose flags have environment twins: SECKILL_
// plus the flag name in upper case with - as _. A flag given on the command
// line wins over its twin.
type flagSet struct {
	*flag.FlagSet
	stderr io.Writer
}

func newFlagSet(name string, stderr io.Writer) flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Errors are reported once, by run; -h prints the flags.
	fs.SetOutput(io.Discard)
	return flagSet{fs, stderr}
}

func envName(flagName string) string {
	return "SECKILL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses args, then fills unset flags from the environment.
func (fs flagSet) parse(args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += " (env " + envName(f.Name) + ")"
	})
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(fs.stderr)
			fmt.Fprintf(fs.stderr, "usage: seckill %s [flags]\n\n", fs.Name())
			fs.PrintDefaults()
			if h := urlHelp(fs); h != "" {
				fmt.Fprintf(fs.stderr, "\n%s", h)
			}
			fmt.Fprintf(fs.stderr, "\n%s", exitStatusHelp)
			return err
		}
		return usagef("%v (see seckill %s -h)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if set[f.Name] || !ok || err != nil {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = usagef("invalid value %q for %s (from the environment): %v", v, envName(f.Name), e)
		}
	})
	return err
}

// logFlags are the logging flags every long-running command has.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(fs flagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// logger returns the process log; the texts in hide never appear in it.
func (l *logFlags) logger(w io.Writer, hide ...string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	if s := (secrets{}).add(hide...); len(s) > 0 {
		opts.ReplaceAttr = s.replaceAttr
	}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not one of text, json", l.format)
}

// ackFlags make a grab's yes durable: answered only once Redis replicas
// hold it (stock.Config.AckReplicas).
type ackFlags struct {
	replicas int
	timeout  time.Duration
}

func (a *ackFlags) register(fs flagSet) {
	fs.IntVar(&a.replicas, "ack-replicas", 0, "answer a grab with its order only once this many Redis replicas hold it (WAIT after each script call on its master); else 504 outcome_unknown. 0: at once, no extra round trip")
	fs.DurationVar(&a.timeout, "ack-timeout", stock.DefaultAckTimeout, "with --ack-replicas, how long the replicas have to confirm a grab (1ms to 900ms: the Redis read timeout, 1s, bounds the script and its wait together)")
}

func (a *ackFlags) check() error {
	switch {
	case a.replicas < 0:
		return usagef("--ack-replicas: %d is negative", a.replicas)
	case a.timeout < time.Millisecond || a.timeout > 900*time.Millisecond:
		return usagef("--ack-timeout: %v is not between 1ms and 900ms", a.timeout)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
