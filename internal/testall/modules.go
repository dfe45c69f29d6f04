package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// A goRun is one go test run: the module directory it runs in and the
// package patterns it tests there.
type goRun struct {
	dir  string // relative to the repository root; "." for the main module
	pkgs []string
}

// nestedModules lists, relative to root, the directories below it that hold
// a go.mod of their own (the lock library and its adapters, the lock's
// tests, the test helpers): go test ./... in the main module does not reach
// them.
func nestedModules(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && name == "go.mod" && filepath.Dir(path) != root {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(dirs)
	return dirs
}

// plan splits the package patterns of args between the main module and the
// nested ones: ./lock/tests/... runs as ./... in lock/tests, and ./lock/...
// in lock and in every module below it. Without patterns every module is
// tested whole.
func plan(args []string, modules []string) (flags []string, runs []goRun) {
	byDir := map[string]*goRun{}
	add := func(dir, pkg string) {
		if byDir[dir] == nil {
			byDir[dir] = &goRun{dir: dir}
			runs = append(runs, goRun{dir: dir})
		}
		byDir[dir].pkgs = append(byDir[dir].pkgs, pkg)
	}
	for _, a := range args {
		if !isPackage(a) {
			flags = append(flags, a)
			continue
		}
		dir, pkg := ".", a
		clean := filepath.ToSlash(filepath.Clean(a))
		for _, m := range modules {
			if clean == m || strings.HasPrefix(clean, m+"/") {
				if len(m) > len(dir) || dir == "." {
					dir, pkg = m, "./"+strings.TrimPrefix(strings.TrimPrefix(clean, m), "/")
				}
			}
		}
		if pkg == "./" {
			pkg = "."
		}
		add(dir, pkg)
		// X/... also means the modules nested below X
		base, ok := strings.CutSuffix(clean, "/...")
		if clean == "..." { // ./... cleaned
			base, ok = ".", true
		}
		if ok {
			for _, m := range modules {
				if m != dir && (base == "." || strings.HasPrefix(m, base+"/")) {
					add(m, "./...")
				}
			}
		}
	}
	if len(runs) == 0 {
		add(".", "./...")
		for _, m := range modules {
			add(m, "./...")
		}
	}
	for i := range runs {
		runs[i].pkgs = byDir[runs[i].dir].pkgs
	}
	return flags, runs
}

func isPackage(a string) bool {
	return a == "." || strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../")
}

// repoRoot is the directory testall runs from: the README says to run it
// from the repository's root.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}

// slow lists, relative to the main module, the packages whose tests take
// minutes (cmd/seckill 7 to 9 of them, faults 3 to 5, in CI): go test starts
// the packages in the order it is given them, so these start first and the
// others share the second slot beside them, instead of one of these
// starting last and running alone.
var slow = []string{"cmd/seckill", "faults"}

// slowFirst lists the packages of the module in dir, the slow ones first,
// for go test; "./..." if go list fails (go test will say why).
func slowFirst(dir string) []string {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return []string{"./..."}
	}
	rank := func(pkg string) int {
		if i := slices.IndexFunc(slow, func(s string) bool { return strings.HasSuffix(pkg, "/"+s) }); i >= 0 {
			return i
		}
		return len(slow)
	}
	pkgs := strings.Fields(string(out))
	slices.SortStableFunc(pkgs, func(a, b string) int { return rank(a) - rank(b) })
	return pkgs
}
