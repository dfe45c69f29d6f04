package stock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial connects to Redis by URL and checks that it answers:
//
//	redis://[user:pass@]host:port[/db]            a single Redis (rediss:// for TLS)
//	redis+cluster://host:port[?addr=host:port...]  Redis Cluster, seeded by one or more nodes
//	redis+sentinel://host:port[,host:port...]/master[?db=0]  Sentinel failover
//
// Timeouts are short: a flash sale prefers a fast "unavailable" to a queue
// of requests waiting on a dead server. So is the dialing: one attempt per
// connection, not go-redis' five, so that a dead master is known as such
// at once (the engine sends a refused grab again, see Config.RetryFor). A
// cluster client also reloads its slot map every ClusterReload, besides
// the reloads that errors trigger (see Engine).
//
// poolSize bounds the connections to each server (0: 64, enough for the
// API's grab combining and lookups).
func Dial(ctx context.Context, rawURL string, poolSize ...int) (redis.UniversalClient, error) {
	pool := 64
	if len(poolSize) > 0 && poolSize[0] > 0 {
		pool = poolSize[0]
	}
	tune := func(dial, read, write *time.Duration, size, dials *int) {
		if *dials == 0 {
			*dials = 1
		}
		if *dial == 0 {
			*dial = 2 * time.Second
		}
		if *read == 0 {
			*read = time.Second
		}
		if *write == 0 {
			*write = time.Second
		}
		if *size == 0 {
			*size = pool
		}
	}
	// No message below quotes the URL: it may hold a password. url.Parse's
	// error quotes the URL whole, and its reasons quote parts of it.
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("bad redis URL: it does not parse (characters such as @ / : # in a password must be percent-encoded)")
	}
	shown := u.Redacted()
	var rdb redis.UniversalClient
	switch u.Scheme {
	case "redis", "rediss":
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("bad redis URL %s: %s", shown, hide(err, u))
		}
		tune(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolSize, &opt.DialerRetries)
		rdb = redis.NewClient(opt)
	case "redis+cluster", "rediss+cluster":
		opt, err := redis.ParseClusterURL(strings.Replace(rawURL, "+cluster", "", 1))
		if err != nil {
			return nil, fmt.Errorf("bad redis cluster URL %s: %s", shown, hide(err, u))
		}
		tune(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolSize, &opt.DialerRetries)
		if opt.ClusterStateReloadInterval == 0 {
			opt.ClusterStateReloadInterval = ClusterReload
		}
		rdb = redis.NewClusterClient(opt)
	case "redis+sentinel":
		master := strings.Trim(u.Path, "/")
		if master == "" || u.Host == "" {
			return nil, fmt.Errorf("bad redis sentinel URL %s: want redis+sentinel://host:port[,host:port]/mastername", shown)
		}
		opt := &redis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(u.Host, ",")}
		if u.User != nil {
			opt.Username = u.User.Username()
			opt.Password, _ = u.User.Password()
		}
		tune(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolSize, &opt.DialerRetries)
		rdb = redis.NewFailoverClient(opt)
	default:
		return nil, fmt.Errorf("bad redis URL %s: the scheme must be redis, rediss, redis+cluster or redis+sentinel", shown)
	}
	rdb.AddHook(pipelineErrors{})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %s does not answer: %w", u.Host, err)
	}
	return rdb, nil
}

// pipelineErrors gives every command of a pipeline that did not run the
// pipeline's error. go-redis does so for a network error, but not for a
// Redis error that came before any command, in a new connection's AUTH or
// HELLO (WRONGPASS after a password rotation, NOAUTH): each command then
// has no error and no reply, and reads as an empty one ("" from a GET:
// `strconv.ParseInt: parsing "": invalid syntax` from Int64; zeros from
// XLEN or XINFO). A pipeline that ran returns the first command's error,
// which that command holds; so an error that no command holds is one that
// came before them all.
type pipelineErrors struct{}

func (pipelineErrors) DialHook(next redis.DialHook) redis.DialHook { return next }

func (pipelineErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (pipelineErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		for _, c := range cmds {
			if c.Err() != nil {
				return err
			}
		}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// ClusterReload is how often a cluster client of Dial reloads its slot map
// when no error asked for it sooner (go-redis' default: a minute), which
// bounds how long a topology change that no error reveals goes unseen.
const ClusterReload = 5 * time.Second

// hide returns err's text without the URL's password.
func hide(err error, u *url.URL) string {
	text := err.Error()
	if pw, ok := u.User.Password(); ok && pw != "" {
		text = strings.ReplaceAll(text, pw, "xxxxx")
	}
	return text
}
