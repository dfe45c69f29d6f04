package main

import (
	"context"
	"debug/buildinfo"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: seckill version, --version and -version print this
// binary's build information; a test binary has no VCS information, and
// says so, with "(devel)" and the Go version.
func TestVersion(t *testing.T) {
	bi, _ := debug.ReadBuildInfo()
	want := versionText(bi)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, stderr := runCLI(t, context.Background(), args...)
		if code != 0 || stderr != "" || stdout != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, stdout, stderr, want)
		}
	}
	if code, _, stderr := runCLI(t, context.Background(), "version", "extra"); code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, %q", code, stderr)
	}
	if !strings.Contains(want, runtime.Version()) {
		t.Errorf("no Go version in %q", want)
	}
}

func TestVersionText(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	goLine := "go1.99.1 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	noVCS := "revision unknown (built without VCS information: go run, go test or -buildvcs=false)\n"
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"go build in a clone", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v0.0.0-20261201225604-fd6c1709cc9b+dirty"},
			Settings: settings("vcs", "git", "vcs.revision", "fd6c1709cc9b1a2e3f4a5b6c7d8e9f0a1b2c3d4e", "vcs.time", "2026-12-01T22:56:04Z", "vcs.modified", "true")},
			"seckill v0.0.0-20261201225604-fd6c1709cc9b+dirty\nrevision fd6c1709cc9b1a2e3f4a5b6c7d8e9f0a1b2c3d4e (2026-12-01T22:56:04Z, modified)\n" + goLine},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.4.0"}},
			"seckill v1.4.0\n" + noVCS + goLine},
		{"clean tree", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.4.0"},
			Settings: settings("vcs", "git", "vcs.revision", "abc", "vcs.modified", "false")},
			"seckill v1.4.0\nrevision abc\n" + goLine},
		{"another VCS", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs", "hg", "vcs.revision", "abc", "vcs.time", "2026-01-02T03:04:05Z")},
			"seckill (devel)\nrevision hg abc (2026-01-02T03:04:05Z)\n" + goLine},
		{"go run", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}},
			"seckill (devel)\n" + noVCS + goLine},
		{"no module version", &debug.BuildInfo{GoVersion: "go1.99.1"}, "seckill (devel)\n" + noVCS + goLine},
		{"no build information", nil, "seckill (devel)\n" + noVCS + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"},
	} {
		if got := versionText(tc.bi); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestVersionBinary: a binary built with -buildvcs=true prints the
// version and revision that go build stamped in it (in a git worktree,
// which go build does not recognise, none: then the fallback).
func TestVersionBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "seckill")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Skipf("go build -buildvcs=true: %v\n%s", err, out) // no git, or a tree it cannot read
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != versionText(bi) {
		t.Errorf("seckill version printed %q, want %q", out, versionText(bi))
	}
	var rev string
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			rev = s.Value
		}
	}
	first, _, _ := strings.Cut(string(out), "\n")
	switch {
	case rev == "":
		t.Logf("no VCS information stamped (a git worktree?): %q", out)
	case !strings.Contains(string(out), "revision "+rev):
		t.Errorf("%q does not show the revision %s", out, rev)
	case first != "seckill "+bi.Main.Version || bi.Main.Version == "(devel)":
		t.Errorf("first line %q, want the stamped version %q", first, bi.Main.Version)
	default:
		t.Logf("%s", out)
	}
}
