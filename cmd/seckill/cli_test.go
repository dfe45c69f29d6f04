package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// runCLI runs a command line in this process, as main does, and returns
// its exit code, stdout and stderr.
func runCLI(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestTokenSecretMessage: a missing or short secret is refused with a
// message that names both the flag and its environment twin.
func TestTokenSecretMessage(t *testing.T) {
	long := strings.Repeat("k", 32)
	for _, tc := range []struct {
		name  string
		args  []string
		env   string // SECKILL_JWT_SECRET, if set
		code  int
		wants []string
	}{
		{"missing", nil, "", 2, []string{"no secret", "--jwt-secret", "SECKILL_JWT_SECRET", "at least 32 bytes"}},
		{"short flag", []string{"--jwt-secret", "short"}, "", 2, []string{"--jwt-secret", "SECKILL_JWT_SECRET", "5 bytes", "at least 32"}},
		{"short env", nil, "tooshort", 2, []string{"--jwt-secret", "SECKILL_JWT_SECRET", "8 bytes", "at least 32"}},
		{"env", []string{"--count", "2"}, long, 0, nil},
		{"flag", []string{"--jwt-secret", long}, "", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SECKILL_JWT_SECRET", tc.env)
			}
			code, stdout, stderr := runCLI(t, context.Background(), append([]string{"token"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			for _, w := range tc.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if tc.code == 0 && (stderr != "" || strings.Count(stdout, ".") < 2) {
				t.Errorf("no token: stdout %q, stderr %q", stdout, stderr)
			}
		})
	}
	// serve names the twin too.
	code, _, stderr := runCLI(t, context.Background(), "serve", "--identity", "jwt", "--jwt-secret", "short")
	if code != 2 || !strings.Contains(stderr, "SECKILL_JWT_SECRET") || !strings.Contains(stderr, "5 bytes") {
		t.Errorf("serve: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, context.Background(), "serve", "--identity", "jwt")
	if code != 2 || !strings.Contains(stderr, "SECKILL_JWT_SECRET") {
		t.Errorf("serve: exit %d, %q", code, stderr)
	}
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }

// TestDialErrorOnce: a Redis or a database that does not answer at start
// is reported once, by the command's own error line: not also by go-redis'
// logger for each attempt (bench --compare, bench --drain, soak and the
// checkers printed "redis: ... pool.go: failed to dial after 5 attempts"
// several times first), nor twice within the error (pgx's TLS and plain
// attempts of sslmode=prefer, one line each).
func TestDialErrorOnce(t *testing.T) {
	redis, dead := redisURL(t), deadAddr(t)
	lite := func() string { return "sqlite://" + filepath.Join(t.TempDir(), "x.db") }
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--redis", "redis://" + dead, "--db", lite()},
		{"serve", "--listen", "127.0.0.1:0", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"},
		{"serve", "--listen", "127.0.0.1:0", "--redis", redis, "--db", "mysql://root@" + dead + "/test"},
		{"worker", "--redis", "redis://" + dead, "--db", lite()},
		{"worker", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"},
		{"bench", "--compare", "--redis", "redis://" + dead, "--db", lite()},
		{"bench", "--compare", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"},
		{"bench", "--drain", "--redis", "redis://" + dead, "--db", lite()},
		{"bench", "--drain", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"},
	} {
		code, _, stderr := runCLI(t, context.Background(), args...)
		checkDialErrorOnce(t, args, code, stderr)
	}
	// go-redis' logger is one per process, and quiet once a command ran in
	// it: a process of its own tells whether run quiets it before any.
	if testing.Short() {
		return
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"bench", "--drain", "--redis", "redis://" + dead, "--db", lite()},
		{"bench", "--compare", "--redis", "redis://" + dead, "--db", lite()},
	} {
		var stderr strings.Builder
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if err != nil {
			code = -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		checkDialErrorOnce(t, args, code, stderr.String())
	}
}

func checkDialErrorOnce(t *testing.T, args []string, code int, stderr string) {
	t.Helper()
	if code == 0 {
		t.Errorf("%v: exit 0", args)
		return
	}
	if n := strings.Count(stderr, "connection refused"); n != 1 {
		t.Errorf("%v: the dial error %d times, want once:\n%s", args, n, stderr)
	}
	if strings.Contains(stderr, "pool.go") || strings.Contains(stderr, "failed to dial after") {
		t.Errorf("%v: go-redis' own log reached stderr:\n%s", args, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); !strings.HasPrefix(lines[0], "seckill "+args[0]+": ") {
		t.Errorf("%v: the error is not the first line:\n%s", args, stderr)
	}
}

func TestWithoutRepeats(t *testing.T) {
	for in, want := range map[string]string{
		"one line":               "one line",
		"a:\n\tx\n\tx":           "a:\n\tx",
		"a:\n\tx\n\ty\n\tx\n\ty": "a:\n\tx\n\ty",
		"a\n\nb\n\nc":            "a\n\nb\n\nc", // blank lines stay
	} {
		if got := withoutRepeats(in); got != want {
			t.Errorf("withoutRepeats(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestValidateBeforeStart: serve, worker, demo, bench and soak refuse a bad
// URL (or JWK Set) before they start anything: no embedded Redis (its
// line), no listener (a taken --listen would be the error instead), no
// SQLite directory or file, no child process.
func TestValidateBeforeStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", busy, "--db", "bogus://x"}, `--db: store: unsupported database URL scheme "bogus"`},
		{[]string{"serve", "--listen", busy, "--db", "sqlite://" + missing + "/x.db"}, "--db: sqlite: bad url"},
		{[]string{"serve", "--listen", busy, "--db", "postgres://u:p@h:notaport/x"}, "--db: postgres: bad url"},
		{[]string{"serve", "--listen", busy, "--db", "mysql://root@127.0.0.1:3306/"}, "--db: mysql: bad url"},
		{[]string{"serve", "--listen", busy, "--redis", "redis://127.0.0.1:6379/notadb"}, "--redis: bad redis URL"},
		{[]string{"serve", "--listen", busy, "--debug-listen", busy, "--redis", "ftp://x"}, "--redis: bad redis URL"},
		{[]string{"serve", "--listen", busy, "--redis-prefix", "a{b}"}, "--redis-prefix"},
		{[]string{"serve", "--listen", busy, "--identity", "jwt", "--jwt-jwks", filepath.Join(missing, "jwks.json")}, "--jwt-jwks"},
		{[]string{"worker", "--metrics-listen", busy, "--redis", "redis://127.0.0.1:6379", "--db", "bogus://x"}, "--db: store"},
		{[]string{"demo", "--db", "sqlite://" + missing + "/x.db"}, "--db: sqlite: bad url"},
		{[]string{"demo", "--redis", "redis+sentinel://h:26379"}, "--redis: bad redis sentinel URL"},
		{[]string{"bench", "--drain", "--db", "bogus://x"}, "--db: store"},
		{[]string{"bench", "--db", "bogus://x"}, "--db: store"},
		{[]string{"bench", "--target", "127.0.0.1:8080", "--activity", "1"}, "--target"},
		{[]string{"bench", "--target", "http://" + busy, "--activity", "1", "--redis", "redis://h/x"}, "--redis: bad redis URL"},
		{[]string{"bench", "--compare", "--redis", "redis+cluster://127.0.0.1:7000"}, "--redis: --compare runs on one Redis server"},
		{[]string{"soak", "--redis", "redis://127.0.0.1:6379", "--db", "sqlite://" + missing + "/x.db"}, "--db: sqlite: bad url"},
	} {
		code, stdout, stderr := runCLI(t, context.Background(), tc.args...)
		if code != exitNotStarted || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, stderr, exitNotStarted, tc.want)
		}
		for _, started := range []string{"embedded redis started", "redis:    embedded", "the embedded Redis", "address already in use"} {
			if strings.Contains(stderr+stdout, started) {
				t.Errorf("%v: %q before the refusal:\n%s%s", tc.args, started, stdout, stderr)
			}
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it never made", missing, err)
	}
}

// TestExitCodes: every way a command cannot start exits with the one code
// that each command's -h documents, 2; a failure after the start with 1.
func TestExitCodes(t *testing.T) {
	redis, dead := redisURL(t), deadAddr(t)
	pg := testenv.PostgresURL(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	lite := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	answers := httptest.NewServer(http.NotFoundHandler()) // a service, for bench's probe
	defer answers.Close()
	for _, tc := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{nil, [2]string{}, "usage: seckill <command>"},
		{[]string{"sell"}, [2]string{}, `unknown command "sell"`},
		{[]string{"serve", "--nope"}, [2]string{}, "flag provided but not defined: -nope"},
		{[]string{"serve", "--batch", "many"}, [2]string{}, `invalid value "many" for flag -batch`},
		{[]string{"serve", "extra"}, [2]string{}, `unexpected argument "extra"`},
		{[]string{"serve", "--queue-work-bits", "40"}, [2]string{}, "--queue-work-bits: 40 is not between 0 and 32"},
		{[]string{"serve", "--queue-hold-window", "500ms"}, [2]string{}, "--queue-hold-window: 500ms is not between 1s and 10m"},
		{[]string{"serve"}, [2]string{"SECKILL_QUEUE_KEY", "short"}, "--queue-key: 5 bytes, want at least 32"},
		{[]string{"worker", "--redis", redis}, [2]string{"SECKILL_LINGER", "soon"}, "SECKILL_LINGER"},
		{[]string{"serve", "--redis", "redis://h:1/notadb"}, [2]string{}, "--redis: bad redis URL"},
		{[]string{"serve", "--redis", redis, "--db", "nodb"}, [2]string{}, "--db: store: database URL has no scheme"},
		{[]string{"serve", "--listen", taken.Addr().String(), "--db", lite}, [2]string{}, "--listen"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--redis", "redis://" + dead, "--db", lite}, [2]string{}, "--redis: redis at " + dead + " does not answer"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"}, [2]string{}, "--db: postgres: cannot reach database"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--identity", "jwt", "--jwt-jwks", filepath.Join(t.TempDir(), "none.json")}, [2]string{}, "--jwt-jwks"},
		{[]string{"worker", "--redis", "redis://" + dead, "--db", lite}, [2]string{}, "does not answer"},
		{[]string{"worker", "--redis", redis, "--db", lite, "--metrics-listen", taken.Addr().String()}, [2]string{}, "--metrics-listen"},
		{[]string{"demo", "--redis", "redis://" + dead}, [2]string{}, "start the service: --redis: redis at"},
		{[]string{"bench", "--target", "http://" + dead, "--activity", "1"}, [2]string{}, "--target: the service does not answer"},
		{[]string{"bench", "--target", answers.URL, "--activity", "1", "--redis", "redis://" + dead, "--db", pg}, [2]string{}, "--redis: redis at"},
		{[]string{"bench", "--compare", "--redis", "redis://" + dead}, [2]string{}, "--redis: redis at"},
		{[]string{"bench", "--compare", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"}, [2]string{}, "does not answer"},
		{[]string{"bench", "--drain", "--redis", "redis://" + dead}, [2]string{}, "--redis: redis at"},
		{[]string{"soak", "--redis", redis, "--db", "postgres://postgres@" + dead + "/test"}, [2]string{}, "--db: postgres://postgres@" + dead + "/test does not answer"},
		{[]string{"token"}, [2]string{}, "no secret"},
		{[]string{"version", "--short"}, [2]string{}, "flag provided but not defined"},
	} {
		if tc.env[0] != "" {
			t.Setenv(tc.env[0], tc.env[1])
		}
		code, _, stderr := runCLI(t, context.Background(), tc.args...)
		if tc.env[0] != "" {
			os.Unsetenv(tc.env[0])
		}
		if code != exitNotStarted || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, stderr, exitNotStarted, tc.want)
		}
	}

	// A bench that started, on a service that refuses every grab, failed.
	in := startServe(t, backend{"postgres", redis, pg}, testenv.Prefix(t))
	code, _, stderr := runCLI(t, context.Background(), "bench", "--target", in.url, "--activity", "999999",
		"--users", "10", "--requests", "20")
	if code != exitFailed || !strings.Contains(stderr, "no grab was accepted") {
		t.Errorf("bench on a refusing service: exit %d, %q; want %d", code, stderr, exitFailed)
	}

	// A bench whose own service could not start says so at once, with 2.
	if testing.Short() {
		return
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command(bin, "bench", "--redis", redis, "--db", "postgres://postgres@"+dead+"/test")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitNotStarted ||
		!strings.Contains(string(out), "seckill serve: --db: postgres: cannot reach database") ||
		!strings.Contains(string(out), "seckill bench: serve did not start (exit status 2; its error is above)") {
		t.Errorf("bench with a dead --db: %v\n%s", err, out)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("bench took %v to say its service did not start", took)
	}
}

// TestHelpExitStatus: each command's -h (exit 0) ends with the exit
// statuses, as the top-level usage does.
func TestHelpExitStatus(t *testing.T) {
	for _, cmd := range []string{"serve", "worker", "demo", "bench", "soak", "token", "version"} {
		code, _, stderr := runCLI(t, context.Background(), cmd, "-h")
		if code != exitOK || !strings.HasSuffix(stderr, exitStatusHelp) {
			t.Errorf("%s -h: exit %d, it does not end with the exit statuses:\n%s", cmd, code, stderr)
		}
	}
	code, stdout, _ := runCLI(t, context.Background(), "help")
	if code != exitOK || !strings.HasSuffix(stdout, exitStatusHelp) {
		t.Errorf("help: exit %d:\n%s", code, stdout)
	}
	if !strings.Contains(exitStatusHelp, "2  could not start") || !strings.Contains(exitStatusHelp, "1  failed after it started") {
		t.Errorf("exit statuses: %q", exitStatusHelp)
	}
}

// TestURLDocs: the URL forms of docs/flags.md are the ones -h prints
// (which TestURLHelp holds to the parsers), and the pages that tell where a
// Redis URL's password goes say what the parser does: in the user info,
// and a password= parameter is refused.
func TestURLDocs(t *testing.T) {
	read := func(page string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", page))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if want := "```\n" + redisURLHelp + benchRedisHelp + "\n" + dbURLHelp + "```"; !strings.Contains(read("docs/flags.md"), want) {
		t.Errorf("docs/flags.md does not show the URL forms as -h prints them:\n%s", want)
	}
	if !strings.Contains(redisURLHelp, "password= and username= among them") {
		t.Errorf("the -h text does not say that password= is refused:\n%s", redisURLHelp)
	}
	for _, page := range []string{"README.md", "docs/production.md", "docs/hostile-clients.md"} {
		text := read(page)
		for _, claim := range []string{"?password=", "password query parameter", "`password` query parameter of a Redis"} {
			if strings.Contains(text, claim) {
				t.Errorf("%s speaks of %q, which a Redis URL refuses", page, claim)
			}
		}
	}
	if !strings.Contains(read("docs/production.md"), "`password=` (or `username=`) query parameter is refused") {
		t.Error("docs/production.md does not say that a Redis URL refuses password=")
	}
}

// TestURLHelp: the -h of every command with --redis or --db shows the URL
// forms, and what they say is what the parsers do: an example of each
// form is accepted by the check and by stock.Dial (which gets as far as
// its ping, on a cancelled context) or store.Open (on real servers, with
// the parameters the text names); what the text says is refused is, by
// the check, and by Dial where Dial refuses it too.
func TestURLHelp(t *testing.T) {
	for _, cmd := range []string{"serve", "worker", "demo", "bench", "soak"} {
		_, _, stderr := runCLI(t, context.Background(), cmd, "-h")
		want := redisURLHelp
		if cmd == "bench" {
			want += benchRedisHelp
		}
		if !strings.Contains(stderr, want) || !strings.Contains(stderr, dbURLHelp) {
			t.Errorf("%s -h does not show the URL forms:\n%s", cmd, stderr)
		}
	}
	if _, _, stderr := runCLI(t, context.Background(), "token", "-h"); strings.Contains(stderr, "URLs") {
		t.Errorf("token -h shows URL forms:\n%s", stderr)
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	dial := func(u string) error {
		rdb, err := stock.Dial(cancelled, u)
		if err == nil {
			rdb.Close()
		}
		return err
	}
	for _, u := range []string{
		"redis://127.0.0.1:6379",
		"redis://",
		"redis://:pw@h:6379/2",
		"redis://user:p%40ss%3Aw%2F%23%3F%25@h/0?dial_timeout=2s&read_timeout=1s&write_timeout=1s&pool_size=64&client_name=x&protocol=2&max_retries=3",
		"rediss://h:6380/1",
		"redis+cluster://h:7000",
		"redis+cluster://u:pw@h:7000?addr=h2:7001&addr=h3:7002&read_only=true&route_by_latency=true&route_randomly=false&max_redirects=3&dial_timeout=2s",
		"rediss+cluster://h:7000",
		"redis+sentinel://h1:26379,h2:26379/mymaster",
		"redis+sentinel://u:pw@h:26379/m",
	} {
		if err := checkRedisURL(u); err != nil {
			t.Errorf("check refuses %s: %v", u, err)
		}
		if err := dial(u); err == nil || !strings.HasPrefix(err.Error(), "redis at ") {
			t.Errorf("stock.Dial(%s): %v, want it to get to its ping", u, err)
		}
	}
	for _, tc := range []struct {
		url      string
		dialToo  bool // stock.Dial refuses it as well (else it would ignore a part)
		wantText string
	}{
		{"redis://h:6379?password=pw", true, "the user and password go in the user info (redis://user:password@host:port"},
		{"rediss://h:6379/0?dial_timeout=2s&password=pw", true, "the user and password go in the user info (rediss://"},
		{"redis://h:6379?username=u", true, "the user and password go in the user info"},
		{"redis://h/notadb", true, "invalid database number"},
		{"unix:///tmp/redis.sock", true, "the scheme must be"},
		{"rediss+sentinel://h:26379/m", true, "the scheme must be"},
		{"redis+cluster://h:7000?password=pw", true, "the user and password go in the user info (redis+cluster://"},
		{"redis+sentinel://h:26379", true, "want redis+sentinel://host:port[,host:port]/mastername"},
		{"redis+sentinel://h:26379/m?db=1", false, "no query parameters"},
		{"redis+sentinel://h:26379/m?password=pw", false, "the user and password go in the user info (redis+sentinel://"},
		{"redis+sentinel://h/m", false, `"h" is not a host:port`},
		{"redis+cluster://h:7000/1", false, "no /db path"},
	} {
		err := checkRedisURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.wantText) {
			t.Errorf("check(%s): %v, want %q", tc.url, err, tc.wantText)
		}
		if err != nil && strings.Contains(err.Error(), "=pw") {
			t.Errorf("check(%s) shows the password: %v", tc.url, err)
		}
		if derr := dial(tc.url); tc.dialToo && (derr == nil || !strings.HasPrefix(derr.Error(), "bad redis")) {
			t.Errorf("stock.Dial(%s): %v, want it refused", tc.url, derr)
		}
	}

	dir := t.TempDir()
	pg, my := testenv.PostgresURL(t), testenv.MySQLURL(t)
	for _, u := range []string{
		pg + "&connect_timeout=5&application_name=seckill-test",
		strings.Replace(pg, "postgres://", "postgresql://", 1),
		my + "?timeout=5s",
		"sqlite://" + dir + "/abs.db?_pragma=synchronous(NORMAL)",
		"sqlite://:memory:",
	} {
		if err := checkDBURL(u); err != nil {
			t.Errorf("check refuses %s: %v", u, err)
			continue
		}
		st, err := store.Open(context.Background(), u)
		if err != nil {
			t.Errorf("store.Open(%s): %v", u, err)
			continue
		}
		st.Close()
	}
	if err := checkDBURL("sqlite://relative.db"); err != nil { // the package's directory
		t.Errorf("check refuses a relative SQLite path: %v", err)
	}
	for _, tc := range []struct{ url, want string }{
		{"mysql://root@127.0.0.1:3306/test?password=pw", "a password goes in the user info"},
		{"mysql://root@127.0.0.1:3306", "no database name"},
		{"sqlite://" + dir + "/no-such-dir/x.db", "does not exist"},
		{"sqlite://", "no path"},
		{"postgres://h:notaport/db", "postgres: bad url"},
		{"mongodb://h/db", `unsupported database URL scheme "mongodb"`},
		{"test.db", "no scheme"},
	} {
		if err := checkDBURL(tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%s): %v, want %q", tc.url, err, tc.want)
		}
	}
}

// TestChildNeedsSeckillBinary: bench, which runs seckill serve as a child
// process, refuses to run this test binary in its place (as "serve" it
// would run the tests, and leave them running).
func TestChildNeedsSeckillBinary(t *testing.T) {
	var stderr strings.Builder
	code := run(context.Background(), []string{"bench", "--users", "10"}, &strings.Builder{}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "is a test binary: it cannot run as a seckill child process") {
		t.Errorf("bench in a test binary: exit %d, %q; want 2 and the refusal", code, stderr.String())
	}
}
