package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
	"github.com/seckilldev/seckill/store/mysql"
	"github.com/seckilldev/seckill/store/sqlite"
)

// The URLs of --redis and --db are checked before a command starts
// anything (an embedded Redis, a SQLite file, a listener, a child process):
// a bad one is refused before any of that, as a bad flag is. The checks
// read the URL only, not whether its server answers.

// redisURLHelp and dbURLHelp end the -h of the commands with --redis or
// --db: what checkRedisURL and checkDBURL accept, which is what stock.Dial
// and store.Open do (TestURLHelp holds an example of each line to both).
const redisURLHelp = `Redis URLs (--redis):
  redis://[[user][:password]@][host][:port][/db][?option=value&...]
      one Redis; rediss:// for TLS. Host localhost, port 6379, db 0 by default
  redis+cluster://[[user][:password]@][host][:port][?addr=host:port&...][&option=value...]
      Redis Cluster, seeded by the node named and one more per addr=;
      rediss+cluster:// for TLS. No /db: a Cluster has database 0 alone
  redis+sentinel://[[user][:password]@]host:port[,host:port...]/mastername
      the master that the Sentinels name, database 0; no query parameters, no TLS.
      The user and password are the master's: the Sentinels are asked without
  options: go-redis' URL options (dial_timeout=2s, read_timeout=1s, write_timeout=1s,
      pool_size=64, client_name=..., protocol=2, max_retries=3, ...; a Cluster's
      read_only, route_by_latency, route_randomly, max_redirects too); any other
      is refused, password= and username= among them (as go-redis does): the user
      and password go in the user info, percent-encoded (@ : / # ? % as
      %40 %3A %2F %23 %3F %25)
  not accepted: unix:// sockets, rediss+sentinel://
`

const dbURLHelp = `Database URLs (--db):
  postgres://[user[:password]@]host[:port]/dbname[?param=value&...]
      PostgreSQL (or postgresql://), port 5432 by default; pgx's parameters, libpq's
      among them: sslmode=disable, connect_timeout=5, password=..., application_name=...
  mysql://[user[:password]@]host[:port]/dbname[?param=value&...]
      MySQL 8 or MariaDB, port 3306 by default; go-sql-driver/mysql's DSN parameters
      (tls=true, timeout=5s, ...) or server variables. The password goes in the user
      info alone (password= is refused: it would be sent as a server variable)
  sqlite://path.db (relative to the current directory), sqlite:///abs/path.db,
  sqlite://:memory: (gone when the process ends), each [?_pragma=name(value)&...]
      SQLite; the file is made if missing, in a directory that must exist
  a password with @ : / # ? % in it: percent-encoded, as for Redis
`

// benchRedisHelp is bench's own rule.
const benchRedisHelp = `  bench --compare runs on one Redis: redis:// or rediss:// (default redis://127.0.0.1:6379)
`

// urlHelp is the end of a command's -h about its URLs: "" for a command
// without --redis or --db.
func urlHelp(fs flagSet) string {
	var b strings.Builder
	if fs.Lookup("redis") != nil {
		b.WriteString(redisURLHelp)
		if fs.Name() == "bench" {
			b.WriteString(benchRedisHelp)
		}
	}
	if fs.Lookup("db") != nil {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(dbURLHelp)
	}
	return b.String()
}

// checkRedisURL refuses what stock.Dial would refuse, without dialling, in
// the same words (no message quotes a password), and what Dial would let
// through but ignore: the query of a Sentinel URL (Dial reads neither a
// ?db= nor anything else there) and the path of a Cluster URL (a Cluster
// has database 0 alone).
func checkRedisURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return errors.New("bad redis URL: it does not parse (characters such as @ / : # in a password must be percent-encoded)")
	}
	shown := redactURL(rawURL) // a password in the query too
	if q := u.Query(); q.Has("password") || q.Has("username") {
		// go-redis' ParseURL reads both from the user info alone: as
		// parameters it refuses them, as unknown options.
		return fmt.Errorf("bad redis URL %s: the user and password go in the user info (%s://user:password@host:port, percent-encoded), not in a query parameter", shown, u.Scheme)
	}
	switch u.Scheme {
	case "redis", "rediss":
		if _, err := redis.ParseURL(rawURL); err != nil {
			return fmt.Errorf("bad redis URL %s: %s", shown, hidePassword(err, u))
		}
	case "redis+cluster", "rediss+cluster":
		if _, err := redis.ParseClusterURL(strings.Replace(rawURL, "+cluster", "", 1)); err != nil {
			return fmt.Errorf("bad redis cluster URL %s: %s", shown, hidePassword(err, u))
		}
		if strings.Trim(u.Path, "/") != "" {
			return fmt.Errorf("bad redis cluster URL %s: a Cluster has database 0 alone: no /db path", shown)
		}
	case "redis+sentinel":
		if strings.Trim(u.Path, "/") == "" || u.Host == "" {
			return fmt.Errorf("bad redis sentinel URL %s: want redis+sentinel://host:port[,host:port]/mastername", shown)
		}
		if u.RawQuery != "" || u.ForceQuery {
			return fmt.Errorf("bad redis sentinel URL %s: it takes no query parameters (its master's database is 0)", shown)
		}
		for _, addr := range strings.Split(u.Host, ",") {
			if h, p, err := net.SplitHostPort(addr); err != nil || h == "" || p == "" {
				return fmt.Errorf("bad redis sentinel URL %s: %q is not a host:port", shown, addr)
			}
		}
	default:
		return fmt.Errorf("bad redis URL %s: the scheme must be redis, rediss, redis+cluster, rediss+cluster or redis+sentinel", shown)
	}
	return nil
}

// hidePassword returns err's text without the URL's password.
func hidePassword(err error, u *url.URL) string {
	text := err.Error()
	if pw, ok := u.User.Password(); ok && pw != "" {
		text = strings.ReplaceAll(text, pw, "xxxxx")
	}
	return text
}

// checkDBURL refuses what store.Open would refuse before it connects, in
// the engines' words, and a SQLite file whose directory does not exist
// (SQLite creates the file, not its directory). A password as a query
// parameter of a MySQL URL is refused too: the driver would send it to
// the server as a session variable (SET password=...).
func checkDBURL(rawURL string) error {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return fmt.Errorf("store: database URL has no scheme: want %s", store.Schemes)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		if _, err := pgxpool.ParseConfig(rawURL); err != nil {
			return fmt.Errorf("postgres: bad url: %w", err)
		}
	case "mysql":
		if _, err := mysql.Config(rawURL); err != nil {
			return err
		}
		if u, err := url.Parse(rawURL); err == nil {
			for k := range u.Query() {
				if strings.EqualFold(k, "password") {
					return fmt.Errorf("mysql: bad url %s: a password goes in the user info (mysql://user:password@host/db), not in a %s parameter", redactURL(rawURL), k)
				}
			}
		}
	case "sqlite":
		if _, err := sqlite.DSN(rawURL); err != nil {
			return err
		}
		rest, _, _ := strings.Cut(strings.TrimPrefix(rawURL, "sqlite://"), "?")
		path, _ := url.PathUnescape(rest) // DSN checked it
		if path != ":memory:" {
			if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
				return fmt.Errorf("sqlite: bad url %s: the directory %s does not exist", rawURL, filepath.Dir(path))
			}
		}
	default:
		return fmt.Errorf("store: unsupported database URL scheme %q: want %s", scheme, store.Schemes)
	}
	return nil
}

// checkURLs checks the URLs that a command was given ("" is none), naming
// the flag in its error, a usage error without the passwords.
func checkURLs(redisURL, dbURL string) error {
	var err error
	if redisURL != "" {
		if e := checkRedisURL(redisURL); e != nil {
			err = usagef("--redis: %v", e)
		}
	}
	if err == nil && dbURL != "" {
		if e := checkDBURL(dbURL); e != nil {
			err = usagef("--db: %v", e)
		}
	}
	return (secrets{}).add(append(urlSecrets(redisURL), urlSecrets(dbURL)...)...).err(err)
}

// probe checks that the servers of a command's URLs answer ("" is none; a
// SQLite file has no server), for a command that would otherwise find out
// only after minutes of work, or in words of its own: bench, which
// verifies on them after its run, bench --compare, and soak, whose
// processes start on them. Its error is a startError.
func probe(ctx context.Context, redisURL, dbURL string) error {
	return notStarted(probeServers(ctx, redisURL, dbURL))
}

func probeServers(ctx context.Context, redisURL, dbURL string) error {
	hide := (secrets{}).add(append(urlSecrets(redisURL), urlSecrets(dbURL)...)...)
	if redisURL != "" {
		rdb, err := stock.Dial(ctx, redisURL, 1)
		if err != nil {
			return hide.err(fmt.Errorf("--redis: %w", err))
		}
		rdb.Close()
	}
	if dbURL != "" && !strings.HasPrefix(strings.ToLower(dbURL), "sqlite:") {
		db, err := store.SQL(dbURL)
		if err != nil {
			return hide.err(fmt.Errorf("--db: %w", err))
		}
		defer db.Close()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := db.PingContext(pctx); err != nil {
			return hide.err(fmt.Errorf("--db: %s does not answer: %w", redactURL(dbURL), err))
		}
	}
	return nil
}
