package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
)

type summary struct {
	command  string
	code     int
	servers  []*server
	binaries map[string]error // by name: nil when on PATH
	race     bool
	raceNote string
	report   *report
}

// writeSummary ends the run with what was missing, what it cost, and what
// to do about it.
func writeSummary(w io.Writer, s summary) {
	r := s.report
	fmt.Fprintf(w, "\n=== SUMMARY: %s: exit %d (packages: %d ok, %d failed)\n", s.command, s.code, r.passed, len(r.failed))
	for _, p := range r.failed {
		fmt.Fprintf(w, "  FAIL %s\n", p)
	}

	var todo []string // what to install or start, in order
	fmt.Fprintln(w, "servers:")
	for _, sv := range s.servers {
		where := fmt.Sprintf("%s (%s)", redacted(sv.Addr), sv.Env)
		switch {
		case sv.err == nil:
			fmt.Fprintf(w, "  %-13s ok       %s\n", sv.Name, where)
		case sv.started != "":
			fmt.Fprintf(w, "  %-13s started  a throwaway redis-server on %s for this run: none at %s\n", sv.Name, sv.started, where)
		default:
			fmt.Fprintf(w, "  %-13s MISSING  %s: %s\n", sv.Name, where, firstLine(sv.err))
			todo = append(todo, advice(sv, s.binaries["redis-server"] == nil)...)
		}
	}
	for _, name := range []string{"redis-server", "redis-cli"} {
		if err := s.binaries[name]; err != nil {
			fmt.Fprintf(w, "  %-13s MISSING  not on PATH (tests that start their own Redis processes need it)\n", name)
			todo = append(todo, installRedis)
		} else {
			fmt.Fprintf(w, "  %-13s ok       on PATH\n", name)
		}
	}
	if s.race {
		fmt.Fprintln(w, "race detector: on")
	} else {
		fmt.Fprintf(w, "race detector: OFF: %s\n", s.raceNote)
	}

	n := r.skippedTotal()
	switch {
	case n == 0 && len(r.examples) == 0:
		fmt.Fprintln(w, "skipped for want of a server: none")
	default:
		var by []string
		for what, c := range r.skipped {
			by = append(by, fmt.Sprintf("%s %d", what, c))
		}
		sort.Strings(by)
		line := fmt.Sprintf("skipped for want of a server: %d tests", n)
		if len(by) > 0 {
			line += " (" + strings.Join(by, ", ") + ")"
		}
		if len(r.examples) > 0 {
			var pkgs []string
			for p := range r.examples {
				pkgs = append(pkgs, p)
			}
			sort.Strings(pkgs)
			line += ", and the examples of " + strings.Join(pkgs, ", ")
		}
		fmt.Fprintln(w, line)
		if os.Getenv("CI") != "true" {
			fmt.Fprintln(w, "  (with CI=true each of them is a failure)")
		}
	}

	todo = dedup(todo)
	if len(todo) > 0 {
		fmt.Fprintln(w, "to run every test, on Debian or Ubuntu:")
		for _, t := range todo {
			fmt.Fprintf(w, "  %s\n", t)
		}
		fmt.Fprintln(w, "  (or point SECKILL_TEST_REDIS, SECKILL_TEST_POSTGRES, SECKILL_TEST_MYSQL at servers you have)")
	}
}

const installRedis = "sudo apt-get install redis-server redis-tools   # Redis on 127.0.0.1:6379, redis-server, redis-cli"

// advice says how to get a missing server as the tests expect it: at the
// default address, with a database named test.
func advice(sv *server, haveRedisServer bool) []string {
	msg := sv.err.Error()
	db := "test"
	if u, err := url.Parse(sv.Addr); err == nil && len(u.Path) > 1 {
		db = u.Path[1:]
	}
	switch sv.Name {
	case "redis":
		if haveRedisServer {
			return []string{"sudo service redis-server start"}
		}
		return []string{installRedis}
	case "postgres":
		if strings.Contains(msg, `database "`) && strings.Contains(msg, "does not exist") {
			return []string{"sudo -u postgres createdb " + db}
		}
		return []string{
			"sudo apt-get install postgresql && sudo service postgresql start",
			"sudo -u postgres createdb " + db,
			"# the tests connect as postgres without a password: add `host all all 127.0.0.1/32 trust`",
			"# to /etc/postgresql/*/main/pg_hba.conf and `sudo service postgresql reload`, or set",
			"# SECKILL_TEST_POSTGRES=postgres://postgres:PASSWORD@127.0.0.1:5432/test?sslmode=disable",
		}
	case "mysql":
		create := `sudo mysql -e "CREATE DATABASE IF NOT EXISTS ` + db + `; CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION"`
		if strings.Contains(msg, "Unknown database") || strings.Contains(msg, "Access denied") {
			return []string{create + "   # the database " + db + ", and root over TCP without a password"}
		}
		return []string{
			"sudo apt-get install mariadb-server && sudo service mariadb start",
			create + "   # the database " + db + ", and root over TCP without a password",
		}
	}
	return nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
