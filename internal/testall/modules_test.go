package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestNestedModules(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"go.mod", "lock/go.mod", "lock/goredis/go.mod", "lock/tests/go.mod",
		"stock/stock.go", ".git/x/go.mod", "stock/testdata/go.mod"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := nestedModules(root)
	if want := []string{"lock", "lock/goredis", "lock/tests"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nestedModules = %v, want %v", got, want)
	}
}

func TestPlan(t *testing.T) {
	modules := []string{"lock", "lock/goredis", "lock/tests"}
	for _, tc := range []struct {
		args      []string
		wantFlags []string
		wantRuns  []goRun
	}{
		{nil, nil, []goRun{{".", []string{"./..."}}, {"lock", []string{"./..."}},
			{"lock/goredis", []string{"./..."}}, {"lock/tests", []string{"./..."}}}},
		{[]string{"-v", "-run", "X", "./stock", "./lock/tests/...", "./sale/...", "./lock"}, []string{"-v", "-run", "X"},
			[]goRun{{".", []string{"./stock", "./sale/..."}}, {"lock/tests", []string{"./..."}}, {"lock", []string{"."}}}},
		{[]string{"-race", "./..."}, []string{"-race"}, []goRun{{".", []string{"./..."}}, {"lock", []string{"./..."}},
			{"lock/goredis", []string{"./..."}}, {"lock/tests", []string{"./..."}}}},
		{[]string{"./lock/..."}, nil,
			[]goRun{{"lock", []string{"./..."}}, {"lock/goredis", []string{"./..."}}, {"lock/tests", []string{"./..."}}}},
	} {
		flags, runs := plan(tc.args, modules)
		if !reflect.DeepEqual(flags, tc.wantFlags) || !reflect.DeepEqual(runs, tc.wantRuns) {
			t.Errorf("plan(%q) = %q, %v; want %q, %v", tc.args, flags, runs, tc.wantFlags, tc.wantRuns)
		}
	}
}

// TestSlowFirst: the repository's own packages, every one once, the slow
// ones first.
func TestSlowFirst(t *testing.T) {
	root := filepath.Join("..", "..")
	list := exec.Command("go", "list", "./...")
	list.Dir = root
	all, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(all))
	got := slowFirst(root)
	if !reflect.DeepEqual(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("slowFirst lists %v, want the packages %v", got, want)
	}
	const mod = "github.com/seckilldev/seckill/"
	if got[0] != mod+slow[0] || got[1] != mod+slow[1] {
		t.Errorf("slowFirst starts with %v, want %s%s and %s%s", got[:2], mod, slow[0], mod, slow[1])
	}
}
