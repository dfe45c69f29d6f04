package main

import (
	"os"
	"path/filepath"
	"reflect"
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
