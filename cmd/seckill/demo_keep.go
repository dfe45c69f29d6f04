package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// keepFlags are demo's --keep and --no-keep: whether the service stays up
// after the report, so that a newcomer can look at the sale on the
// dashboard. By default it does when the demo runs in a terminal; an
// unattended run (a script, CI) ends as soon as the report is out.
type keepFlags struct{ keep, noKeep bool }

// keepCountdown is the countdown of a demo that keeps the service up and
// was given none: time to open the dashboard before the crowd comes.
const keepCountdown = 10 * time.Second

func (k *keepFlags) register(fs flagSet) {
	fs.BoolVar(&k.keep, "keep", false, "keep the service and its dashboard up after the report, until Enter or Ctrl-C (default when run in a terminal)")
	fs.BoolVar(&k.noKeep, "no-keep", false, "stop the service after the report, as an unattended run does")
}

// resolve says whether to keep the service up. When it does and the
// countdown was left at its default (not given on the command line or in
// the environment), the countdown becomes keepCountdown.
func (k keepFlags) resolve(fs flagSet, countdown *time.Duration) (bool, error) {
	if k.keep && k.noKeep {
		return false, usagef("--keep and --no-keep contradict each other")
	}
	keep := k.keep || !k.noKeep && term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stderr.Fd()))
	if keep {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "countdown" })
		if _, env := os.LookupEnv(envName("countdown")); !given && !env {
			*countdown = keepCountdown
		}
	}
	return keep, nil
}

// keepServing returns once the user presses Enter (or in ends) or ctx ends
// (Ctrl-C), while the service goes on serving its dashboard at url.
func keepServing(ctx context.Context, in io.Reader, url string, w io.Writer) {
	fmt.Fprintf(w, "\nthe service keeps running: the dashboard at %s shows the sale; press Enter or Ctrl-C to stop\n", url)
	line := make(chan struct{})
	go func() {
		// Left blocked on a terminal when ctx ends first; the demo exits.
		_, _ = bufio.NewReader(in).ReadString('\n')
		close(line)
	}()
	select {
	case <-line:
	case <-ctx.Done():
	}
}
