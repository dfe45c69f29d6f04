package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/seckilldev/seckill/internal/testenv"
)

// event is one line of go test -json (see go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// report prints go test -json's events as go test prints its output without
// -json: a line per package, and the output of failed tests and packages
// only (everything with -v). It counts the tests skipped for want of a
// server: their output carries testenv.MissingHint.
type report struct {
	w       io.Writer
	verbose bool

	pkgOut  map[string][]string // package-level output, by package
	testOut map[string][]string // output of a top-level test and its subtests, by package+" "+test
	missing map[string]string   // what a test lacked, by package+" "+test

	skipped  map[string]int    // skipped tests by what they lacked: "redis", "redis-server", ...
	examples map[string]string // packages whose examples were left out, and what they lacked
	passed   int               // packages
	failed   []string          // packages
}

func newReport(w io.Writer, verbose bool) *report {
	return &report{w: w, verbose: verbose,
		pkgOut: map[string][]string{}, testOut: map[string][]string{}, missing: map[string]string{},
		skipped: map[string]int{}, examples: map[string]string{}}
}

func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text()) // not an event: pass it on
			continue
		}
		r.event(e)
	}
}

func (r *report) event(e event) {
	if e.Action == "build-output" {
		fmt.Fprint(r.w, e.Output)
		return
	}
	if e.Test == "" {
		r.packageEvent(e)
		return
	}
	top := e.Package + " " + strings.SplitN(e.Test, "/", 2)[0]
	id := e.Package + " " + e.Test
	switch e.Action {
	case "output":
		if what, ok := lacked(e.Output); ok {
			r.missing[id] = what
		}
		if r.verbose {
			fmt.Fprint(r.w, e.Output)
		} else if !strings.HasPrefix(e.Output, "=== ") {
			r.testOut[top] = append(r.testOut[top], e.Output)
		}
	case "skip":
		if what, ok := r.missing[id]; ok {
			r.skipped[what]++
		}
		fallthrough
	case "pass", "fail":
		delete(r.missing, id)
		if top != id {
			return
		}
		if e.Action == "fail" {
			r.print(r.testOut[top])
		}
		delete(r.testOut, top)
	}
}

func (r *report) packageEvent(e event) {
	p := e.Package
	switch e.Action {
	case "output":
		if what, ok := lacked(e.Output); ok {
			r.examples[p] = what
		}
		if r.verbose {
			fmt.Fprint(r.w, e.Output)
		} else {
			r.pkgOut[p] = append(r.pkgOut[p], e.Output)
		}
	case "pass", "skip":
		r.passed++
		if !r.verbose {
			// as go test shows a passing package: its ok or ? line
			for _, line := range r.pkgOut[p] {
				if strings.HasPrefix(line, "ok  ") || strings.HasPrefix(line, "?   ") {
					fmt.Fprint(r.w, line)
				}
			}
		}
		r.forget(p)
	case "fail":
		r.failed = append(r.failed, p)
		if !r.verbose {
			// tests that never ended (a panic, a timeout) first, then the
			// package's own output
			for k, lines := range r.testOut {
				if strings.HasPrefix(k, p+" ") {
					r.print(lines)
				}
			}
			r.print(r.pkgOut[p])
		}
		r.forget(p)
	}
}

func (r *report) forget(pkg string) {
	delete(r.pkgOut, pkg)
	for k := range r.testOut {
		if strings.HasPrefix(k, pkg+" ") {
			delete(r.testOut, k)
		}
	}
}

func (r *report) print(lines []string) {
	for _, l := range lines {
		fmt.Fprint(r.w, l)
	}
}

// lacked tells what a skip message of testenv.Missing says was missing:
// "redis", "postgres", "mysql", or a binary such as "redis-server".
func lacked(line string) (string, bool) {
	if !strings.Contains(line, testenv.MissingHint) {
		return "", false
	}
	_, msg, ok := strings.Cut(line, "skipping: ")
	if !ok {
		return "other", true
	}
	msg = strings.TrimPrefix(msg, "the examples: ")
	for _, s := range testenv.Servers() {
		if strings.HasPrefix(msg, s.Name+" at ") {
			return s.Name, true
		}
	}
	if name, _, ok := strings.Cut(msg, " binary: "); ok && !strings.Contains(name, " ") {
		return name, true
	}
	return "other", true
}

func (r *report) skippedTotal() int {
	n := 0
	for _, c := range r.skipped {
		n += c
	}
	return n
}
