package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionCmd prints what this binary is: the module version, the VCS
// revision it was built from, and the Go that built it.
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := fs.parse(args); err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	_, err := io.WriteString(stdout, versionText(bi))
	return err
}

// versionText describes a build in three lines:
//
//	seckill v1.4.0
//	revision 4f2a...e1 (2026-12-01T22:56:04Z, modified)
//	go1.26.8 linux/amd64
//
// The version is the module's (a tag, or the pseudo-version that go build
// derives from the VCS), "(devel)" when there is none; the revision line
// says so when the build holds no VCS information (go run, go test, or
// -buildvcs=false). bi nil: no build information at all.
func versionText(bi *debug.BuildInfo) string {
	version, goVersion := "", runtime.Version()
	vcs := map[string]string{}
	if bi != nil {
		version = bi.Main.Version
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			if name, ok := strings.CutPrefix(s.Key, "vcs."); ok {
				vcs[name] = s.Value
			} else if s.Key == "vcs" { // the system: git, hg, ...
				vcs[""] = s.Value
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seckill %s\n", version)
	if rev := vcs["revision"]; rev != "" {
		var notes []string
		if t := vcs["time"]; t != "" {
			notes = append(notes, t)
		}
		if vcs["modified"] == "true" {
			notes = append(notes, "modified")
		}
		if sys := vcs[""]; sys != "" && sys != "git" {
			rev = sys + " " + rev
		}
		fmt.Fprintf(&b, "revision %s", rev)
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
		b.WriteByte('\n')
	} else {
		b.WriteString("revision unknown (built without VCS information: go run, go test or -buildvcs=false)\n")
	}
	fmt.Fprintf(&b, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
