package cluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Config describes a deployment. The processes reach Redis and the
// database by the URLs given, which may lead through a proxy that a test
// cuts; the checker is given direct URLs separately.
type Config struct {
	// Binary is the seckill binary. Required.
	Binary string
	// RedisURL and DBURL are the --redis and --db of every process. Required.
	RedisURL string
	DBURL    string
	// WorkerRedisURL, if set, is the workers' --redis instead of RedisURL:
	// a link of their own, to slow.
	WorkerRedisURL string
	// Prefix is the --redis-prefix. Required.
	Prefix string
	// AdminToken is the --admin-token of the APIs. Default "faults-admin-token-0123456789abcdef".
	AdminToken string
	// ClaimIdle is the workers' --claim-idle. Default 1s.
	ClaimIdle time.Duration
	// Batch is the workers' --batch. Default 20.
	Batch int
	// APIArgs are more flags of every API instance (e.g. --ack-replicas).
	APIArgs []string
	// LogLevel is the processes' --log-level. Default "warn".
	LogLevel string
	// Log receives every line a process writes, with its name; nil drops them.
	Log func(name, line string)
	// StartTimeout bounds the wait for an API to answer. Default 30s.
	StartTimeout time.Duration
}

// Cluster is a set of seckill processes of one deployment. Its methods are
// safe for concurrent use.
type Cluster struct {
	cfg    Config
	client *http.Client

	mu      sync.Mutex
	apis    []*API
	workers []*Worker
}

// API is one `seckill serve --no-worker` instance, on a fixed address that
// a restart keeps.
type API struct {
	Name string
	Addr string // host:port
	URL  string // http://host:port

	mu   sync.Mutex
	proc *Proc
}

// Proc returns the API's current process.
func (a *API) Proc() *Proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc
}

// Worker is one `seckill worker` process.
type Worker struct {
	Name string

	mu       sync.Mutex
	proc     *Proc
	consumer string
}

// Proc returns the worker's current process.
func (w *Worker) Proc() *Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc
}

// Consumer returns the consumer name of the worker's current process.
func (w *Worker) Consumer() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consumer
}

// New returns an empty cluster.
func New(cfg Config) (*Cluster, error) {
	if cfg.Binary == "" || cfg.RedisURL == "" || cfg.DBURL == "" || cfg.Prefix == "" {
		return nil, errors.New("cluster: Binary, RedisURL, DBURL and Prefix are required")
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = "faults-admin-token-0123456789abcdef"
	}
	if cfg.ClaimIdle == 0 {
		cfg.ClaimIdle = time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 20
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	return &Cluster{cfg: cfg, client: &http.Client{Timeout: 10 * time.Second}}, nil
}

// Config returns the configuration with its defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

func (c *Cluster) common(redisURL string) []string {
	return []string{"--redis", redisURL, "--db", c.cfg.DBURL, "--redis-prefix", c.cfg.Prefix,
		"--log-level", c.cfg.LogLevel}
}

// StartAPI starts an API instance on a free loopback port and waits until
// it answers.
func (c *Cluster) StartAPI(ctx context.Context) (*API, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	a := &API{Name: fmt.Sprintf("api%d", len(c.apis)), Addr: addr, URL: "http://" + addr}
	c.apis = append(c.apis, a)
	c.mu.Unlock()
	return a, c.RestartAPI(ctx, a)
}

// RestartAPI starts a's process again on its address (after a kill) and
// waits until it answers HTTP; it kills a process still running first.
func (c *Cluster) RestartAPI(ctx context.Context, a *API) error {
	if p := a.Proc(); p != nil && !p.Exited() {
		p.Kill()
	}
	args := append([]string{"serve", "--no-worker", "--listen", a.Addr, "--admin-token", c.cfg.AdminToken}, c.common(c.cfg.RedisURL)...)
	args = append(args, c.cfg.APIArgs...)
	p, err := Start(c.cfg.Binary, a.Name, args, c.cfg.Log)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.proc = p
	a.mu.Unlock()
	return c.waitHTTP(ctx, a)
}

// waitHTTP waits until the API answers any HTTP request: /healthz says
// 503 while the database is away, and that is an answer.
func (c *Cluster) waitHTTP(ctx context.Context, a *API) error {
	deadline := time.Now().Add(c.cfg.StartTimeout)
	p := a.Proc()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/healthz", nil)
		resp, err := c.client.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("cluster: %s exited while starting: %v", a.Name, p.Err())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %s does not answer after %s: %v", a.Name, c.cfg.StartTimeout, err)
		}
	}
}

// StartWorker starts a worker under the consumer name given ("" names it
// after its index).
func (c *Cluster) StartWorker(consumer string) (*Worker, error) {
	c.mu.Lock()
	w := &Worker{Name: fmt.Sprintf("worker%d", len(c.workers))}
	c.workers = append(c.workers, w)
	c.mu.Unlock()
	if consumer == "" {
		consumer = w.Name
	}
	return w, c.RestartWorker(w, consumer)
}

// RestartWorker starts w's process again under the consumer name given:
// the old name resumes its own pending entries at once, a new one leaves
// them to be claimed after ClaimIdle. A process still running is killed
// first.
func (c *Cluster) RestartWorker(w *Worker, consumer string) error {
	if p := w.Proc(); p != nil && !p.Exited() {
		p.Kill()
	}
	args := append([]string{"worker", "--claim-idle", c.cfg.ClaimIdle.String(), "--batch", strconv.Itoa(c.cfg.Batch),
		"--consumer", consumer}, c.common(cmp.Or(c.cfg.WorkerRedisURL, c.cfg.RedisURL))...)
	p, err := Start(c.cfg.Binary, w.Name, args, c.cfg.Log)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.proc, w.consumer = p, consumer
	w.mu.Unlock()
	return nil
}

// APIs returns the API instances, in the order started.
func (c *Cluster) APIs() []*API {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*API(nil), c.apis...)
}

// Workers returns the workers, in the order started.
func (c *Cluster) Workers() []*Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Worker(nil), c.workers...)
}

// URLs returns the base URLs of the API instances.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, a := range c.APIs() {
		urls = append(urls, a.URL)
	}
	return urls
}

// CreateActivity creates a sale of stock units in buckets buckets (0: the
// service's default), open from now for the duration given, through the
// first API that answers.
func (c *Cluster) CreateActivity(ctx context.Context, name string, stock int64, open time.Duration, buckets int) (int64, error) {
	now := time.Now().UTC()
	sale := map[string]any{"name": name, "stock": stock,
		"starts_at": now.Add(-time.Second).Format(time.RFC3339Nano), "ends_at": now.Add(open).Format(time.RFC3339Nano)}
	if buckets > 0 {
		sale["buckets"] = buckets
	}
	body, _ := json.Marshal(sale)
	var last error
	for _, a := range c.APIs() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/api/v1/activities", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.cfg.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.client.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			last = fmt.Errorf("cluster: create activity: %d %s", resp.StatusCode, b)
			continue
		}
		var act struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(b, &act); err != nil || act.ID <= 0 {
			return 0, fmt.Errorf("cluster: create activity: bad reply %s", b)
		}
		return act.ID, nil
	}
	if last == nil {
		last = errors.New("cluster: create activity: no API running")
	}
	return 0, last
}

// Revive continues stopped processes and restarts exited ones (workers
// under their last consumer name), so that the deployment can drain.
func (c *Cluster) Revive(ctx context.Context) error {
	var errs []error
	for _, w := range c.Workers() {
		p := w.Proc()
		switch {
		case p == nil || p.Exited():
			errs = append(errs, c.RestartWorker(w, w.Consumer()))
		case p.Stopped():
			errs = append(errs, p.Cont())
		}
	}
	for _, a := range c.APIs() {
		p := a.Proc()
		switch {
		case p == nil || p.Exited():
			errs = append(errs, c.RestartAPI(ctx, a))
		case p.Stopped():
			errs = append(errs, p.Cont())
		}
	}
	return errors.Join(errs...)
}

// Shutdown sends SIGTERM to every process (workers first, as an operator
// would drain) and waits for each; it returns the processes that did not
// exit with code 0.
func (c *Cluster) Shutdown(timeout time.Duration) error {
	var errs []error
	for _, w := range c.Workers() {
		if p := w.Proc(); p != nil {
			if err := p.Term(timeout); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.Name, err))
			}
		}
	}
	for _, a := range c.APIs() {
		if p := a.Proc(); p == nil {
			continue
		}
		if err := a.Proc().Term(timeout); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Kill kills every process still running.
func (c *Cluster) Kill() {
	for _, w := range c.Workers() {
		if p := w.Proc(); p != nil {
			p.Kill()
		}
	}
	for _, a := range c.APIs() {
		if p := a.Proc(); p != nil {
			p.Kill()
		}
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("cluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
