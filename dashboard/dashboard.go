// Package dashboard is seckill's live web dashboard, served by `seckill
// serve` under /dashboard/: for each live activity the stock left in Redis
// and in the database, the order stream's backlog, and the orders by state;
// for the instance, grabs per second by outcome and the grab latency; for an
// admin, a form to create a sale, its sold-out moment and last accepted
// grab, and the invariant checker's verdict (package check). A chart of
// `seckill bench --compare`'s results is shown when they were saved.
//
// One goroutine (Run) computes the figures once per tick and encodes them
// once; the same bytes go to every open page over Server-Sent Events. A
// page costs one goroutine and one small write per tick, and a slow page
// misses ticks rather than holding up the others, so a hundred viewers do
// not touch the grab path. Nothing is computed while nobody watches.
//
// The page, its script and the chart library (uPlot, vendored from npm with
// its licence) are embedded: no build step, no CDN.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/stock"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard/"

//go:embed assets
var assets embed.FS

// Config says where the dashboard's figures come from. Zero values take
// the defaults.
type Config struct {
	// Store and Engine are the service's database and Redis. Required.
	Store  seckill.Store
	Engine *stock.Engine
	// Observer reads the activities' state in Redis; share the one that
	// serves /metrics (stock.Collector) so that both views read Redis
	// once. Default: one of the dashboard's own over Engine.
	Observer *stock.Observer
	// Metrics is gathered once per tick for the grab counters
	// (seckill_grabs_total) and the grab route's latency histogram
	// (seckill_http_request_seconds). Give it a registry of those two
	// collectors alone: collectors that query Redis or the database at
	// scrape time would do so at every tick. Nil: no rates, no latency.
	Metrics prometheus.Gatherer
	// Room, if set, is the service's waiting rooms: the activities that
	// have one show its figures (Activity.Queue), as this instance last
	// read them.
	Room *queue.Room
	// IsAdmin reports whether a request carries the admin's credentials
	// (the API's check: httpapi.Server.IsAdmin); it guards the checker.
	// Nil turns the admin view off.
	IsAdmin func(*http.Request) bool
	// Scrub hides the secrets (passwords of the URLs) in the errors' texts
	// the admin's frames carry. Default: none hidden.
	Scrub func(string) string
	// DBURL is the database's URL, opened for each run of the checker,
	// which reads the tables directly. "": no checker.
	DBURL string
	// CompareResults is the file `seckill bench --compare --results`
	// writes; "" or a missing file: no comparison chart.
	CompareResults string
	// Tick is how often the figures are computed and sent. Default 250ms.
	Tick time.Duration
	// Activities bounds the activities shown: the newest that have not
	// ended more than ten minutes ago. Default 8.
	Activities int
	// MaxViewers bounds the open event streams; more are refused with
	// 503. Default 1000.
	MaxViewers int
	// Log receives what could not be read. Default: discarded.
	Log *slog.Logger
}

// Defaults of Config.
const (
	DefaultTick       = 250 * time.Millisecond
	DefaultActivities = 8
	DefaultMaxViewers = 1000
)

// Dashboard serves the page and its event stream. Run must run for the
// stream to carry figures.
type Dashboard struct {
	cfg     Config
	mux     *http.ServeMux
	hub     *hub
	sampler *sampler
	checks  chan struct{} // one checker run at a time
}

// New returns a dashboard; Run computes its figures.
func New(cfg Config) *Dashboard {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Activities <= 0 {
		cfg.Activities = DefaultActivities
	}
	if cfg.Observer == nil {
		cfg.Observer = stock.NewObserver(cfg.Engine)
	}
	if cfg.MaxViewers <= 0 {
		cfg.MaxViewers = DefaultMaxViewers
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Scrub == nil {
		cfg.Scrub = func(s string) string { return s }
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux(), hub: newHub(cfg.MaxViewers, cfg.Tick),
		sampler: newSampler(cfg), checks: make(chan struct{}, 1)}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed's own layout
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(static))
	d.mux.Handle("GET "+Prefix+"{$}", files) // index.html
	d.mux.Handle("GET "+Prefix+"app/", files)
	d.mux.Handle("GET "+Prefix+"vendor/", files)
	d.mux.HandleFunc("GET "+Prefix+"events", d.events)
	d.mux.HandleFunc("GET "+Prefix+"api/check/{id}", d.check)
	d.mux.HandleFunc("GET "+Prefix+"api/compare", d.compare)
	// Every other request answers in JSON, as the API does: ServeMux's own
	// answers would be text (405) or a redirect of any method (307, from
	// /dashboard to /dashboard/).
	d.mux.HandleFunc("/dashboard", func(w http.ResponseWriter, r *http.Request) {
		if d.getOnly(w, r) {
			// The page's address without its slash: a browser is sent
			// on, with no HTML body.
			w.Header().Set("Location", Prefix)
			w.WriteHeader(http.StatusMovedPermanently)
		}
	})
	d.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		if d.getOnly(w, r) {
			writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "no such dashboard resource: "+r.Method+" "+r.URL.Path)
		}
	})
	return d
}

// getOnly answers 405, with Allow, a method other than GET or HEAD on a
// path a GET would find (every dashboard resource is read-only), and
// reports whether the request is still to be answered.
func (d *Dashboard) getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	get := r.Clone(r.Context())
	get.Method = http.MethodGet
	if _, pattern := d.mux.Handler(get); pattern != Prefix {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "only GET and HEAD are allowed here")
		return false
	}
	return true
}

// securityHeaders go on every dashboard response. The page takes the admin
// token: no other site may frame it (a click on its forms would be the
// admin's), no script but its own may run in it, nothing it serves may be
// sniffed into another type, and no address of it leaves in a Referer. Its
// own files, the event stream and the API's routes are all it loads (uPlot
// sets styles through the CSSOM, which style-src does not govern).
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
	{"X-Frame-Options", "DENY"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
}

// ServeHTTP serves the dashboard, with securityHeaders. A path that is not
// clean (//, /./, /../) is not found, rather than redirected as ServeMux
// would, with an HTML body.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for _, kv := range securityHeaders {
		h.Set(kv[0], kv[1])
	}
	if p := r.URL.Path; p == "" || p[0] != '/' || cleaned(p) != p {
		writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "no such dashboard resource")
		return
	}
	d.mux.ServeHTTP(w, r)
}

// cleaned is p as ServeMux would redirect it to: path.Clean, keeping a
// trailing slash.
func cleaned(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Run computes the figures once per tick while a page watches, and sends
// them to every page. When ctx ends it closes every event stream (an open
// stream would otherwise hold a server's graceful shutdown until its
// timeout) and returns.
func (d *Dashboard) Run(ctx context.Context) {
	defer d.hub.close()
	t := time.NewTicker(d.cfg.Tick)
	defer t.Stop()
	for {
		if !d.hub.watched() {
			select {
			case <-ctx.Done():
				return
			case <-d.hub.wake:
			}
			// Counters read before the pause would give a rate over
			// the pause.
			d.sampler.forget()
		}
		f := d.sampler.frame(ctx, d.hub.count())
		b, err := json.Marshal(f)
		if err == nil {
			var admin []byte // nil: the same as b
			if af := f.forAdmin(); af != nil {
				admin, err = json.Marshal(af)
			}
			if err == nil {
				d.hub.publish(b, admin, f.Time)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// isAdmin reports whether r carries the admin's credentials.
func (d *Dashboard) isAdmin(r *http.Request) bool {
	return d.cfg.IsAdmin != nil && d.cfg.IsAdmin(r)
}

// writeError answers in the API's error shape.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
