// Package worker moves accepted grabs from the activities' Redis streams into
// the database: the peak-shaving half of a sale. It reads in batches through
// a consumer group, writes each batch in one transaction (Store.ApplyOrders),
// gives back stock for orders the database refused, and acknowledges only
// after all that. Entries left pending by a dead worker are claimed after an
// idle time; an entry delivered too often ends as a failed order.
//
// One loop serves every live activity, on a Redis client of the worker's
// own, so that neither its goroutines nor its connections grow with the
// number of sales (see Run). A stream whose Redis node fails is set aside
// until the node answers again, so that on a Redis Cluster one dead master
// holds up no other (see away.go).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
)

// Config tunes a Worker. Zero values take the defaults.
type Config struct {
	// Consumer names this worker in the consumer groups. Default
	// "<hostname>-<pid>-<random>". A worker restarted under the same name
	// resumes its own pending entries at once; under a new name they are
	// claimed after ClaimIdle.
	Consumer string
	// Batch is the most entries written in one transaction while a stream
	// keeps up with orders that come a few at a time (with Linger
	// negative: with any crowd). Default 200.
	Batch int
	// MaxBatch is the most entries written in one transaction when a
	// stream has a backlog (when a read of it gets all it asked for: see
	// Run), or after a linger. Default 4000, and never below Batch.
	MaxBatch int
	// Parallel is how many batches are written at once: of different
	// activities, or of one activity with a backlog. Default 4.
	Parallel int
	// Linger is how long, at least, lies between the starts of two rounds
	// while a crowd's orders arrive (the last round read crowdEntries or
	// more) and every stream keeps up (no backlog): the orders accepted in
	// between are read together, up to MaxBatch, and written in one
	// transaction per stream instead of one per few milliseconds. A
	// database's cost is largely per transaction (measured on PostgreSQL
	// with the API on the same two cores: 19 µs of database CPU per order
	// in the ~180-order batches of a worker that reads as soon as it has
	// written, 10 µs with a linger of 50ms), and that CPU is taken from
	// the grab path while the crowd is there. Orders that come a few at a
	// time are read at once, and so is a backlog. Default 50ms; negative:
	// none.
	Linger time.Duration
	// Poll is how often streams that look idle are read anyway, in case a
	// wake-up message was lost in a way the subscription cannot tell (the
	// awake flag of a worker that died while reading). Default 5s.
	Poll time.Duration
	// ClaimIdle is how long an entry stays pending with a silent consumer
	// before another worker claims it. Default 15s.
	ClaimIdle time.Duration
	// MaxDeliveries: an entry delivered more often ends as a failed order
	// (reason "poison"). Default 5.
	MaxDeliveries int64
	// Discover is how often the list of activities is refreshed. Default 2s.
	Discover time.Duration
	// Retention: activities that ended longer ago are no longer consumed.
	// Default 24h.
	Retention time.Duration
	// Retain is how long an activity's keys stay in Redis after its end;
	// then, once every order of it is written, the worker deletes them.
	// Default 10m; negative: never.
	Retain time.Duration
	// DrainTimeout bounds the drain when Run's ctx ends: the work on the
	// batches in hand, and reading what the streams held at that moment.
	// Default 30s.
	DrainTimeout time.Duration
	// TrimEvery is how often acknowledged entries are trimmed from the
	// streams that had any. Default 10s; negative: never.
	TrimEvery time.Duration
}

func (c *Config) defaults() {
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if c.Batch <= 0 {
		c.Batch = 200
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 4000
	}
	c.MaxBatch = max(c.MaxBatch, c.Batch)
	if c.Parallel <= 0 {
		c.Parallel = 4
	}
	if c.Linger == 0 {
		c.Linger = 50 * time.Millisecond
	}
	if c.Poll <= 0 {
		c.Poll = 5 * time.Second
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 15 * time.Second
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5
	}
	if c.Discover <= 0 {
		c.Discover = 2 * time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Retain == 0 {
		c.Retain = 10 * time.Minute
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.TrimEvery == 0 {
		c.TrimEvery = 10 * time.Second
	}
}

// crowdEntries is the least a round must read for the next one to linger
// (see Config.Linger): fewer means the orders come a few at a time, each
// round driven by their arrival, and a transaction per round costs the
// database little; holding them back would only delay them.
const crowdEntries = 32

// Worker consumes the order streams of all live activities.
type Worker struct {
	store   seckill.Store
	engine  *stock.Engine
	rdb     redis.UniversalClient
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	// prober holds the streams whose Redis node failed (see away.go); set
	// by Run.
	prober *prober
	// owed runs the reconciliations of batches committed whose Redis
	// steps gave up (see owe); its context, set by Run, ends after the
	// drain, and Run waits for them.
	owed     sync.WaitGroup
	owedCtx  context.Context
	stopOwed context.CancelFunc

	// crashAt, set by tests, is asked at each stage of a batch ("read":
	// before the database write, "committed": before compensation and ack);
	// true makes this consumer stop on the spot, as if killed.
	crashAt func(stage string) bool
}

// errCrashed is the simulated crash of a test.
var errCrashed = errors.New("worker: simulated crash")

// New returns a worker over engine's Redis client, which should be the
// worker's own: its reads must not wait behind, nor hold up, the API's
// requests. metrics may be nil.
func New(store seckill.Store, engine *stock.Engine, cfg Config, log *slog.Logger, metrics *Metrics) *Worker {
	cfg.defaults()
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Worker{store: store, engine: engine, rdb: engine.Client(), cfg: cfg,
		log: log.With("consumer", cfg.Consumer), metrics: metrics}
}

// Consumer returns the worker's consumer name.
func (w *Worker) Consumer() string { return w.cfg.Consumer }

// streamID names an order stream: one per bucket of an activity (see
// stock.BucketKeys).
type streamID struct {
	activity int64
	bucket   int
}

// stream is the worker's state of one order stream.
type stream struct {
	a    seckill.Activity
	id   streamID
	key  string // the bucket's Keys.Orders
	meta string // and Keys.Meta, which holds its awake flag (stock.MetaAwake)
	log  *slog.Logger
	// start is "0" until this consumer's own pending entries (from an
	// earlier life under the same name) are read again, then ">".
	start string
	// hot streams are read every round; a cold one only on a wake-up
	// message, on a poll, or in the drain.
	hot       bool
	claimAt   time.Time // next XAUTOCLAIM
	claimFrom string    // XAUTOCLAIM cursor, "0-0" to start over
	// settled: no entry was pending at the last claim, and none was
	// delivered since: nothing to claim until the stream gets orders.
	settled bool
	dirty   bool // entries acknowledged since the last trim
	// backlog: the last read got all it asked for, so the stream likely
	// holds more; the next read asks for Parallel batches of MaxBatch.
	backlog bool
	// ahead is the stream's next read, made while the previous batches
	// were written; nil if not made yet.
	ahead *readResult
	// cutoff, in the drain, is the last entry the stream held when the
	// drain began: reading stops past it.
	cutoff string
	// away: the stream's Redis node failed; it waits for the prober (see
	// away.go) and is left out of everything else meanwhile.
	away bool
}

// Run consumes until ctx ends, then drains (see Config.DrainTimeout) and
// returns nil.
//
// Every activity's stream is served by this one loop. A round reads the
// hot streams with one pipelined, non-blocking XREADGROUP each (on Redis
// Cluster the client splits the pipeline by node), then writes the batches
// it got, Parallel at a time. A stream that gives nothing is made cold: the
// worker deletes its awake flag and reads once more, so that an order that
// arrives from then on makes grab.lua set the flag again and publish the
// activity on the wake-up channel. When every stream is cold the loop waits
// on that channel, so an idle sale costs nothing, and a new order is read
// as soon as it is accepted. Cold streams are read anyway after the
// subscription was re-established (messages may have been lost meanwhile)
// and every Poll.
//
// A stream with a backlog (its last read got all it asked for) gets
// batches of MaxBatch, since each transaction costs round trips and a
// commit whatever its size; and it gets Parallel of them a round, written
// at once: in the database they take turns on the activity's lock (on
// PostgreSQL only for their last step: see store/postgres), the next one
// queued as soon as one commits, and each one's Redis work (compensating,
// acknowledging) overlaps another's database work. A read that gets less
// than it asked for ends the backlog. While a crowd's orders arrive and
// every stream keeps up, a round begins at least Linger after the previous
// one, and reads up to MaxBatch: what gathered in between goes in one
// transaction. Orders that come a few at a time are read at once, in
// batches of Batch.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info("worker started")
	w.owedCtx, w.stopOwed = context.WithCancel(context.WithoutCancel(ctx))
	defer func() { w.stopOwed(); w.owed.Wait() }()
	sub := w.rdb.Subscribe(ctx, w.engine.WakeChannel())
	defer sub.Close()
	wake := sub.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(5 * time.Second))
	subscribed := false
	w.prober = newProber(w.rdb)
	probing, stopProbing := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() { defer close(probed); w.prober.run(probing) }()
	defer func() { stopProbing(); <-probed }()

	streams := map[streamID]*stream{}
	retired := map[int64]time.Time{} // deleted from Redis: not consumed again (value: the activity's end)
	discover := time.NewTicker(w.cfg.Discover)
	defer discover.Stop()
	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	nextTrim := time.Now().Add(w.cfg.TrimEvery)
	w.discover(ctx, streams, retired)
	// rediscover refreshes the list of activities and retires the ended
	// ones. The next refresh is due a whole Discover after this one ended:
	// one slower than the interval (a loaded database, thousands of
	// sales) would otherwise find the next tick ready at once, every time,
	// and keep the loop from its rounds.
	rediscover := func() {
		w.discover(ctx, streams, retired)
		w.retire(ctx, streams, retired)
		discover.Reset(w.cfg.Discover)
	}

	// event handles what woke the loop; it reports whether to poll.
	event := func(m any) (pollNow bool) {
		switch m := m.(type) {
		case *redis.Message:
			w.woken(ctx, m, streams, retired)
		case *redis.Subscription:
			// The first confirmation is the subscription itself; a later
			// one follows a reconnection, which may have lost messages.
			pollNow, subscribed = subscribed, true
		}
		return pollNow
	}
	pollNow := false
	var lastRound time.Time // the start of the last round of hot streams
	crowd := false          // whether that round read crowdEntries or more
	for ctx.Err() == nil {
	events:
		for {
			select {
			case m := <-wake:
				pollNow = event(m) || pollNow
			case <-discover.C:
				rediscover()
			case <-poll.C:
				pollNow = true
			case <-w.prober.ready:
				w.returned(streams)
			default:
				break events
			}
		}
		if pollNow {
			// Read the cold streams; those with entries turn hot, the
			// others stay cold (their flags are as they were).
			var cold []*stream
			for _, s := range streams {
				if !s.hot && !s.away {
					cold = append(cold, s)
				}
			}
			pollNow = false
			if _, err := w.round(ctx, cold, false); err == errCrashed {
				return nil
			}
		}
		if err := w.claimDue(ctx, streams); err == errCrashed {
			return nil
		}
		if w.cfg.TrimEvery > 0 && time.Now().After(nextTrim) {
			w.trim(ctx, streams)
			nextTrim = time.Now().Add(w.cfg.TrimEvery)
		}
		hot := w.hot(streams)
		if len(hot) == 0 {
			// A claim that falls due wakes the loop too: a dead
			// consumer's backlog is claimed a batch a turn of the loop,
			// not a batch per unrelated event.
			claim, stopClaim := w.claimTimer(streams)
			select {
			case <-ctx.Done():
			case m := <-wake:
				pollNow = event(m)
			case <-discover.C:
				rediscover()
			case <-poll.C:
				pollNow = true
			case <-w.prober.ready:
				w.returned(streams)
			case <-claim:
			}
			stopClaim()
			continue
		}
		// While the streams keep up with a crowd, the next round waits
		// out the linger (see Config.Linger) and reads what gathered
		// meanwhile.
		gather := w.cfg.Linger > 0 && crowd && !slices.ContainsFunc(hot, func(s *stream) bool { return s.backlog })
		if gather {
			if sleep(ctx, time.Until(lastRound.Add(w.cfg.Linger))); ctx.Err() != nil {
				continue
			}
		}
		lastRound = time.Now()
		got, err := w.round(ctx, hot, gather)
		if err == errCrashed {
			return nil
		}
		read := 0
		for _, n := range got {
			read += n
		}
		crowd = read >= crowdEntries
		if err != nil && ctx.Err() == nil {
			// The failing streams are away: the others go on at once.
			w.log.Warn("read streams", "err", err)
		}
		// Streams that gave nothing cool down: with the awake flag gone,
		// the next accepted order wakes this loop. Read them once more
		// after that, or an order accepted in between would wait for a poll.
		var idle []*stream
		for _, s := range hot {
			if got[s] == 0 && s.start == ">" {
				idle = append(idle, s)
			}
		}
		if len(idle) > 0 && ctx.Err() == nil {
			if !w.sleepFlags(ctx, idle) {
				// A flag left set would keep grab.lua from publishing
				// the next order: the streams stay hot, to be read and
				// cooled again next round.
				for _, s := range idle {
					s.hot = true
				}
			} else if _, err := w.round(ctx, idle, false); err == errCrashed {
				return nil
			}
		}
	}
	w.drain(streams)
	w.log.Info("worker stopped")
	return nil
}

// hot returns the streams to read this round.
func (w *Worker) hot(streams map[streamID]*stream) []*stream {
	var hot []*stream
	for _, s := range streams {
		if s.hot && !s.away {
			hot = append(hot, s)
		}
	}
	return hot
}

// returned takes back the streams whose node answers again (see away.go).
func (w *Worker) returned(streams map[streamID]*stream) {
	for _, id := range w.prober.takeBack() {
		if s := streams[id]; s != nil && s.away {
			s.away, s.hot, s.settled = false, true, false
			s.log.Info("redis answers again for the stream; resuming")
		}
	}
}

// round reads a batch from each stream with one pipeline and writes what
// it got, Parallel batches at a time. A stream that gave entries, or an
// error, stays hot; one that gave none (or is not loaded) is left cold,
// except while its own pending entries are being read again. It reports the
// streams that gave entries, and how many each gave.
//
// While the batches are written, the next read of each stream with a
// backlog is made already (the next round takes it), so that the database
// does not wait for Redis between rounds. A round that gathers (after a
// linger) reads up to MaxBatch of each stream.
func (w *Worker) round(ctx context.Context, ss []*stream, gather bool) (map[*stream]int, error) {
	var toRead []*stream
	for _, s := range ss {
		if s.ahead == nil {
			toRead = append(toRead, s)
		}
	}
	w.read(ctx, toRead, gather)
	got := make(map[*stream]int)
	var work []batch
	var firstErr error
	var ahead []*stream
	for _, s := range ss {
		r := s.ahead
		s.ahead, s.backlog = nil, false
		switch {
		case errors.Is(r.err, redis.Nil):
		case stock.IsNoGroup(r.err):
			// The activity is not (yet, or no longer) in Redis; the API
			// loads it, with its group, on the next grab, which then
			// wakes this loop.
			s.hot = false
			continue
		case r.err != nil:
			// The stream's node is away: the stream waits for the prober.
			// The read may have run and its reply been lost (a timeout):
			// the entries it delivered are pending with this consumer,
			// where a read of ">" never finds them again, so the stream
			// comes back reading its own pending entries, as after a
			// restart.
			if firstErr == nil && ctx.Err() == nil {
				firstErr = fmt.Errorf("activity %d (stream %s): %w", s.a.ID, s.key, r.err)
			}
			w.prober.leave(s)
			continue
		}
		msgs := r.msgs
		if len(msgs) == 0 {
			if s.start != ">" {
				s.start = ">" // own pending entries done; stay hot for new ones
			} else {
				s.hot = false
			}
			continue
		}
		got[s] = len(msgs)
		s.hot, s.settled = true, false
		s.backlog = len(msgs) >= r.count
		if s.cutoff != "" && !stock.IDLess(msgs[len(msgs)-1].ID, s.cutoff) {
			s.hot = false // drained up to where the drain began
		}
		if s.start != ">" {
			s.start = msgs[len(msgs)-1].ID
		}
		for chunk := range slices.Chunk(msgs, r.size) {
			work = append(work, batch{s: s, msgs: chunk, size: r.size})
		}
		if s.backlog && s.hot && s.start == ">" {
			ahead = append(ahead, s)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ctx.Err() == nil {
			w.read(ctx, ahead, false)
		}
	}()
	failed, err := w.processAll(ctx, work)
	<-done
	w.redo(failed)
	if err != nil {
		return got, err
	}
	return got, firstErr
}

// readResult is what one read of a stream got.
type readResult struct {
	size  int // the batch size
	count int // entries asked for: size, or Parallel batches of it
	msgs  []redis.XMessage
	err   error
}

// read reads the next entries of each stream, with one pipeline, into
// its ahead: a batch (of Batch, or of MaxBatch if gather), or Parallel
// batches of MaxBatch if it has a backlog.
func (w *Worker) read(ctx context.Context, ss []*stream, gather bool) {
	if len(ss) == 0 {
		return
	}
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(ss))
	for i, s := range ss {
		r := &readResult{size: w.cfg.Batch, count: w.cfg.Batch}
		switch {
		case s.backlog:
			r.size, r.count = w.cfg.MaxBatch, w.cfg.MaxBatch*w.cfg.Parallel
		case gather:
			r.size, r.count = w.cfg.MaxBatch, w.cfg.MaxBatch
		}
		s.ahead = r
		cmds[i] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: stock.Group, Consumer: w.cfg.Consumer,
			Streams: []string{s.key, s.start}, Count: int64(r.count), Block: -1})
	}
	_, _ = pipe.Exec(ctx)
	for i, s := range ss {
		res, err := cmds[i].Result()
		s.ahead.err = err
		for _, r := range res {
			s.ahead.msgs = append(s.ahead.msgs, r.Messages...)
		}
	}
}

// batch is entries of one stream to write.
type batch struct {
	s    *stream
	msgs []redis.XMessage
	// size is the batch size the entries were read with (see readResult);
	// 0 means Batch.
	size   int
	counts map[string]int64 // deliveries, for claimed entries
	// Set by process: the entries are acknowledged; or a Redis step of
	// theirs (compensation, acknowledgement) gave up.
	acked, redisFailed bool
}

// processAll writes the batches, Parallel jobs at a time (see jobs). It
// returns the batches whose entries were left pending (see redo).
func (w *Worker) processAll(ctx context.Context, work []batch) ([]batch, error) {
	if len(work) == 0 {
		return nil, nil
	}
	sem := make(chan struct{}, w.cfg.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var crashed bool
	var failed []batch
	for _, job := range w.jobs(work) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := w.process(ctx, job)
			mu.Lock()
			defer mu.Unlock()
			for _, b := range job {
				switch {
				case err == errCrashed:
					crashed = true
				case b.acked:
					b.s.dirty = true
				case ctx.Err() == nil:
					failed = append(failed, b)
				}
			}
		}()
	}
	wg.Wait()
	if crashed {
		return nil, errCrashed
	}
	return failed, nil
}

// redo makes the streams of batches left pending read this consumer's own
// pending entries again (a read of ">" never finds them): at once, or,
// those whose Redis step failed, once their node answers (see away.go).
// It runs in the Run loop, with no read of the streams in flight.
func (w *Worker) redo(failed []batch) {
	for _, b := range failed {
		s := b.s
		s.ahead = nil // what it read is pending too: "0" reads it again
		switch {
		case s.away:
		case b.redisFailed:
			w.prober.leave(s)
		default:
			s.start, s.hot = "0", true
		}
	}
}

// jobs groups the batches into the transactions that write them: a full
// batch alone (of the size it was read with: Batch, or MaxBatch after a
// linger or with a backlog), and smaller ones of several streams together,
// up to that size a job. A crowd spread over hundreds of sales, or over
// the buckets of one, would otherwise cost a transaction per stream per
// round (with a commit each, one at a time on SQLite): 16 buckets read
// after a linger are one transaction, as their sale of one bucket is. The
// database locks a job's activities in one order (see Store.ApplyOrders),
// so jobs written at once cannot deadlock.
func (w *Worker) jobs(work []batch) [][]batch {
	var jobs [][]batch
	var small []batch
	n := 0
	for _, b := range work {
		size := b.size
		if size == 0 {
			size = w.cfg.Batch
		}
		switch {
		case len(b.msgs) >= size:
			jobs = append(jobs, []batch{b})
			continue
		case n+len(b.msgs) > size:
			jobs = append(jobs, small)
			small, n = nil, 0
		}
		small = append(small, b)
		n += len(b.msgs)
	}
	if len(small) > 0 {
		jobs = append(jobs, small)
	}
	return jobs
}

// sleepFlags deletes the awake flags of streams that gave nothing: the
// next order accepted on one of them publishes a wake-up. It reports
// whether every flag is surely deleted.
func (w *Worker) sleepFlags(ctx context.Context, ss []*stream) bool {
	pipe := w.rdb.Pipeline()
	for _, s := range ss {
		pipe.HDel(ctx, s.meta, stock.MetaAwake)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("clear awake flags", "err", err)
		}
		return false
	}
	return true
}

// woken handles a wake-up message: the stream it names (an activity's, or
// one bucket's: see stock.WakeMessage) is read next round; an activity the
// worker does not know yet is looked up first.
func (w *Worker) woken(ctx context.Context, m *redis.Message, streams map[streamID]*stream, retired map[int64]time.Time) {
	if m == nil {
		return
	}
	id, bucket, err := stock.ParseWake(m.Payload)
	if err != nil {
		return
	}
	w.log.Debug("woken", "activity", id, "bucket", bucket)
	if s := streams[streamID{id, bucket}]; s != nil {
		// Another worker may take the new orders, and die: claims resume.
		s.hot, s.settled = true, false
		return
	}
	if _, gone := retired[id]; gone {
		return
	}
	a, err := w.store.Activity(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("look up woken activity", "activity", id, "err", err)
		}
		return
	}
	w.add(streams, a)
}

// add starts consuming an activity's streams, one per bucket.
func (w *Worker) add(streams map[streamID]*stream, a seckill.Activity) {
	keys := w.engine.Keys(a)
	for b, k := range keys {
		log := w.log.With("activity", a.ID)
		if len(keys) > 1 {
			log = log.With("bucket", b)
		}
		id := streamID{a.ID, b}
		streams[id] = &stream{a: a, id: id, key: k.Orders, meta: k.Meta, log: log,
			start: "0", hot: true, claimFrom: "0-0"}
	}
}

// discover adds the activities that ended less than Retention ago and
// drops those that ended before.
func (w *Worker) discover(ctx context.Context, streams map[streamID]*stream, retired map[int64]time.Time) {
	since := time.Now().Add(-w.cfg.Retention)
	acts, err := w.store.Activities(ctx, since)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("list activities", "err", err)
		}
		return
	}
	for _, a := range acts {
		if _, gone := retired[a.ID]; !gone && streams[streamID{a.ID, 0}] == nil {
			w.add(streams, a)
		}
	}
	for id, s := range streams {
		if s.a.EndsAt.Before(since) {
			s.log.Info("activity no longer consumed: ended longer ago than the retention")
			delete(streams, id)
			w.prober.forget(id)
		}
	}
	for id, end := range retired {
		if end.Before(since) {
			delete(retired, id)
		}
	}
}

// retire deletes the Redis keys of activities that ended more than Retain
// ago once every order of theirs is written (stock.Engine.Retire).
func (w *Worker) retire(ctx context.Context, streams map[streamID]*stream, retired map[int64]time.Time) {
	if w.cfg.Retain < 0 {
		return
	}
	// An activity is retired whole, once every stream of it is quiet.
	busy := map[int64]bool{}
	ended := map[int64]*stream{} // an activity's first stream
	for _, s := range streams {
		switch {
		case time.Since(s.a.EndsAt) < w.cfg.Retain || s.hot || s.away:
			busy[s.a.ID] = true
		case ended[s.a.ID] == nil || s.id.bucket == 0:
			ended[s.a.ID] = s
		}
	}
	for id, s := range ended {
		if busy[id] {
			continue
		}
		done, err := w.engine.Retire(ctx, s.a, w.cfg.Retain)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("retire activity from redis", "err", err)
			}
			continue
		}
		if done {
			s.log.Info("activity retired from redis: ended and every order written")
			for b := range s.a.BucketCount() {
				delete(streams, streamID{id, b})
			}
			retired[id] = s.a.EndsAt
		}
	}
}

// claimTimer returns a channel that fires when the next claim falls due,
// nil if none will (every stream settled or away), and its stop.
func (w *Worker) claimTimer(streams map[streamID]*stream) (<-chan time.Time, func() bool) {
	var next time.Time
	for _, s := range streams {
		if !s.settled && !s.away && (next.IsZero() || s.claimAt.Before(next)) {
			next = s.claimAt
		}
	}
	if next.IsZero() {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(next))
	return t.C, t.Stop
}

// claimDue takes over, for each stream whose time has come, the entries
// that other consumers left pending longer than ClaimIdle, and writes them.
func (w *Worker) claimDue(ctx context.Context, streams map[streamID]*stream) error {
	now := time.Now()
	var due []*stream
	for _, s := range streams {
		if !s.settled && !s.away && now.After(s.claimAt) {
			due = append(due, s)
		}
	}
	if len(due) == 0 || ctx.Err() != nil {
		return nil
	}
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.XAutoClaimCmd, len(due))
	pending := make([]*redis.XPendingCmd, len(due))
	for i, s := range due {
		cmds[i] = pipe.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s.key, Group: stock.Group,
			Consumer: w.cfg.Consumer, MinIdle: w.cfg.ClaimIdle, Start: s.claimFrom, Count: int64(w.cfg.MaxBatch)})
		pending[i] = pipe.XPending(ctx, s.key, stock.Group)
	}
	_, _ = pipe.Exec(ctx)
	var work []batch
	for i, s := range due {
		msgs, next, err := cmds[i].Result()
		s.claimAt = now.Add(w.cfg.ClaimIdle / 3)
		if err != nil {
			if stock.IsNoGroup(err) {
				s.settled = true // not loaded: a grab loads it and wakes us
			} else if ctx.Err() == nil {
				s.log.Warn("claim idle entries", "err", err)
				// As for a read (see round): what the claim took may be
				// pending with this consumer, its reply lost.
				w.prober.leave(s)
			}
			continue
		}
		if p, err := pending[i].Result(); err == nil && p.Count == 0 && len(msgs) == 0 {
			s.settled = true
		}
		if next != "0-0" && next != "" && next != "0" {
			s.claimFrom, s.claimAt = next, now // more to look at: next round
		} else {
			s.claimFrom = "0-0"
		}
		if len(msgs) == 0 {
			continue
		}
		w.metrics.Claimed.Add(float64(len(msgs)))
		s.log.Info("claimed idle entries", "entries", len(msgs))
		counts, err := w.deliveries(ctx, s.key, msgs)
		if err != nil {
			s.log.Warn("read delivery counts", "err", err)
			continue
		}
		work = append(work, batch{s: s, msgs: msgs, counts: counts})
	}
	failed, err := w.processAll(ctx, work)
	w.redo(failed)
	return err
}

// trim deletes the acknowledged entries of the streams that had any since
// the last trim.
func (w *Worker) trim(ctx context.Context, streams map[streamID]*stream) {
	for _, s := range streams {
		if !s.dirty || s.away || ctx.Err() != nil {
			continue
		}
		n, err := w.engine.Trim(ctx, s.key)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("trim stream", "err", err)
			}
			continue
		}
		s.dirty = false
		if n > 0 {
			s.log.Debug("trimmed stream", "entries", n)
		}
	}
}

// drain, once Run's ctx has ended, writes what the streams held at that
// moment: this consumer's own pending entries and every entry not yet
// delivered, up to each stream's last entry then (what arrives later is
// left to the workers that keep running). It gives up after DrainTimeout;
// whatever is left stays in the streams for another worker.
func (w *Worker) drain(streams map[streamID]*stream) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.DrainTimeout)
	defer cancel()
	var ss []*stream
	pipe := w.rdb.Pipeline()
	var last []*redis.XMessageSliceCmd
	for _, s := range streams {
		ss = append(ss, s)
		last = append(last, pipe.XRevRangeN(ctx, s.key, "+", "-", 1))
	}
	_, _ = pipe.Exec(ctx)
	var todo []*stream
	for i, s := range ss {
		msgs, err := last[i].Result()
		if err != nil || len(msgs) == 0 {
			continue
		}
		// Entries read ahead are pending with this consumer: read again
		// from "0" with the others.
		s.cutoff, s.start, s.hot, s.ahead = msgs[0].ID, "0", true, nil
		todo = append(todo, s)
	}
	began := time.Now()
	for ctx.Err() == nil {
		hot := todo[:0:0]
		for _, s := range todo {
			if s.hot {
				hot = append(hot, s)
			}
		}
		if len(hot) == 0 {
			break
		}
		if _, err := w.round(ctx, hot, false); err == errCrashed {
			return
		} else if err != nil && ctx.Err() == nil {
			w.log.Warn("drain: read streams", "err", err)
			sleep(ctx, 50*time.Millisecond)
		}
		// A stream's own pending entries read again ("0") leave it hot;
		// after them, reading goes on with ">" up to the cutoff.
	}
	if ctx.Err() != nil {
		w.log.Warn("drain timed out: orders left in the streams for another worker", "after", time.Since(began))
		return
	}
	w.log.Info("drained: every order read was written", "took", time.Since(began))
}

// deliveries returns how often each message was delivered.
func (w *Worker) deliveries(ctx context.Context, stream string, msgs []redis.XMessage) (map[string]int64, error) {
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: stock.Group, Start: msgs[0].ID, End: msgs[len(msgs)-1].ID,
		Count: int64(len(msgs)) * 2,
	}).Result()
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(p))
	for _, e := range p {
		counts[e.ID] = e.RetryCount
	}
	return counts, nil
}

// process writes a job to the database in one transaction, compensates
// refused orders and acknowledges: a job is one batch, or the small
// batches of several streams (see jobs). It keeps trying while the
// database is unreachable; once ctx ends it still tries for DrainTimeout,
// then leaves the entries pending (another worker, or this one restarted,
// will claim them). The Redis steps give up sooner (see redisPatience).
func (w *Worker) process(ctx context.Context, job []batch) error {
	log := job[0].s.log
	if len(job) > 1 {
		log = w.log.With("activities", len(job))
	}
	if w.crashAt != nil && w.crashAt("read") {
		return errCrashed
	}
	work, cancel := drainContext(ctx, w.cfg.DrainTimeout)
	defer cancel()
	began := time.Now()
	stopHeartbeat := w.heartbeat(work, job)
	defer stopHeartbeat()

	var apply, poison []seckill.OrderRequest
	ids := make([][]string, len(job))
	entries := 0
	for i, b := range job {
		entries += len(b.msgs)
		for _, m := range b.msgs {
			ids[i] = append(ids[i], m.ID)
			req, err := stock.ParseEntry(b.s.a.ID, m)
			if err != nil {
				// Nothing can be done for an entry that names no order:
				// drop it loudly rather than block the stream behind it.
				b.s.log.Error("malformed stream entry dropped", "id", m.ID, "err", err)
				w.metrics.Malformed.Inc()
				continue
			}
			if b.counts[m.ID] > w.cfg.MaxDeliveries {
				poison = append(poison, req)
			} else {
				apply = append(apply, req)
			}
		}
	}

	reqs := append(slices.Clone(apply), poison...)
	outcomes := make([]seckill.Outcome, 0, len(reqs))
	if len(apply) > 0 {
		out, err := w.applyOrIsolate(work, apply, log)
		if err != nil {
			log.Warn("batch left pending", "entries", entries, "err", err)
			return err
		}
		outcomes = append(outcomes, out...)
	}
	if len(poison) > 0 {
		log.Error("entries delivered too often: failing their orders", "orders", len(poison))
		out, err := retry(work, log, func(ctx context.Context) ([]seckill.Outcome, error) {
			return w.store.FailOrders(ctx, poison, seckill.ReasonPoison)
		})
		if err != nil {
			log.Warn("batch left pending", "entries", entries, "err", err)
			return err
		}
		outcomes = append(outcomes, out...)
	}

	if w.crashAt != nil && w.crashAt("committed") {
		return errCrashed
	}
	// The Redis steps are bounded (see redisPatience): a dead node's batch
	// must not hold up the others'.
	rctx, rcancel := context.WithTimeout(work, redisPatience)
	defer rcancel()
	acts := make(map[int64]seckill.Activity, len(job))
	for _, b := range job {
		acts[b.s.a.ID] = b.s.a
	}
	for i, o := range outcomes {
		r := reqs[i]
		if o.Status != seckill.OrderFailed {
			continue
		}
		_, err := retry(rctx, log, func(ctx context.Context) (bool, error) {
			return w.engine.Compensate(ctx, acts[r.ActivityID], r.UserID, r.OrderID, o.ExistingOrderID)
		})
		if err != nil {
			log.Warn("compensation pending", "order", r.OrderID, "err", err)
			for i := range job {
				job[i].redisFailed = job[i].redisFailed || job[i].s.a.ID == r.ActivityID
			}
			w.owe(job, reqs, outcomes)
			return err
		}
	}
	// Each stream's acknowledgement stands alone: a dead node's leaves
	// the others done.
	acked := make([]int64, len(job))
	_, err := retry(rctx, log, func(ctx context.Context) (struct{}, error) {
		pipe := w.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(job))
		for i := range job {
			if !job[i].acked {
				cmds[i] = pipe.XAck(ctx, job[i].s.key, stock.Group, ids[i]...)
			}
		}
		_, err := pipe.Exec(ctx)
		for i, c := range cmds {
			if c != nil && c.Err() == nil {
				job[i].acked, acked[i] = true, c.Val()
			}
		}
		return struct{}{}, err
	})
	if err != nil {
		log.Warn("ack failed: the entries stay pending, written again once redis answers (harmless)", "err", err)
		for i := range job {
			job[i].redisFailed = !job[i].acked
		}
		w.owe(job, reqs, outcomes)
		return err
	}
	for i, b := range job {
		if acked[i] < int64(len(ids[i])) {
			// Some entries were no longer pending: another worker
			// finished them (harmless), or Redis lost the stream, and
			// perhaps rebuilt the activity from a snapshot taken before
			// this commit.
			w.reconcile(work, b.s.a, reqs, outcomes, b.s.log)
		}
	}
	w.metrics.observe(outcomes, time.Since(began))
	log.Debug("batch written", "entries", entries, "took", time.Since(began))
	return nil
}

// owe reconciles, in the background, the confirmed orders of each batch
// of job whose Redis steps gave up after the commit. Their entries stay
// pending, to be written again and acknowledged once the node answers
// (see away.go), unless the node is gone and a replica promoted without
// them: then no entry is left to write again, and nothing else would
// teach the new master these committed orders (the API's resync reads the
// database once, perhaps before this commit). Reconcile is idempotent:
// where the node kept the entries it changes nothing.
func (w *Worker) owe(job []batch, reqs []seckill.OrderRequest, outcomes []seckill.Outcome) {
	for _, b := range job {
		if !b.redisFailed {
			continue
		}
		buyers := confirmed(b.s.a.ID, reqs, outcomes)
		if len(buyers) == 0 {
			continue
		}
		w.owed.Add(1)
		go func() {
			defer w.owed.Done()
			w.reconcileBuyers(w.owedCtx, b.s.a, buyers, b.s.log)
		}()
	}
}

// confirmed returns the confirmed orders of the activity among reqs.
func confirmed(activityID int64, reqs []seckill.OrderRequest, outcomes []seckill.Outcome) []seckill.Buyer {
	var buyers []seckill.Buyer
	for i, o := range outcomes {
		if o.Status == seckill.OrderConfirmed && reqs[i].ActivityID == activityID {
			buyers = append(buyers, seckill.Buyer{UserID: reqs[i].UserID, OrderID: reqs[i].OrderID})
		}
	}
	return buyers
}

// reconcile tells Redis about the batch's confirmed orders of the activity
// that it may not know (stock.Engine.Reconcile), waiting for the activity
// to be loaded again if Redis lost it.
func (w *Worker) reconcile(ctx context.Context, a seckill.Activity, reqs []seckill.OrderRequest, outcomes []seckill.Outcome, log *slog.Logger) {
	w.reconcileBuyers(ctx, a, confirmed(a.ID, reqs, outcomes), log)
}

// reconcileBuyers is reconcile of the given orders, trying again until
// Redis answers (and has the activity loaded) or ctx ends.
func (w *Worker) reconcileBuyers(ctx context.Context, a seckill.Activity, confirmed []seckill.Buyer, log *slog.Logger) {
	b := newBackoff()
	for ctx.Err() == nil {
		n, err := w.engine.Reconcile(ctx, a, confirmed)
		if err == nil {
			if n > 0 {
				log.Warn("redis had lost confirmed orders; reconciled", "units", n)
				w.metrics.Reconciled.Add(float64(n))
			}
			return
		}
		if !errors.Is(err, stock.ErrNotLoaded) {
			log.Warn("reconcile", "err", err)
		}
		b.sleep(ctx)
	}
	log.Error("reconcile gave up: redis did not take these confirmed orders in time", "orders", len(confirmed))
}

// heartbeat keeps the entries in hand from looking idle while process
// waits for the database: XCLAIM with JUSTID resets their idle time without
// counting a delivery, so no other worker claims them and a long database
// outage does not turn good orders into poison.
func (w *Worker) heartbeat(ctx context.Context, job []batch) (stop func()) {
	keys, ids := make([]string, len(job)), make([][]string, len(job))
	for i, b := range job {
		keys[i] = b.s.key
		for _, m := range b.msgs {
			ids[i] = append(ids[i], m.ID)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ClaimIdle / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pipe := w.rdb.Pipeline()
				for i, key := range keys {
					pipe.XClaimJustID(ctx, &redis.XClaimArgs{Stream: key, Group: stock.Group,
						Consumer: w.cfg.Consumer, Messages: ids[i]})
				}
				if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
					w.log.Warn("heartbeat on entries in hand", "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// applyOrIsolate applies the batch. If the database is up but keeps
// refusing the batch with an error, it applies each half on its own, and so
// on down, so that a single bad request cannot block the others and costs a
// few transactions per halving, not one per request; a request that fails
// alone ends as a poison failure.
func (w *Worker) applyOrIsolate(ctx context.Context, reqs []seckill.OrderRequest, log *slog.Logger) ([]seckill.Outcome, error) {
	out, err := retry(ctx, log, func(ctx context.Context) ([]seckill.Outcome, error) {
		return w.store.ApplyOrders(ctx, reqs)
	})
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	if len(reqs) == 1 {
		log.Error("order refused by the database", "order", reqs[0].OrderID, "err", err)
		return retry(ctx, log, func(ctx context.Context) ([]seckill.Outcome, error) {
			return w.store.FailOrders(ctx, reqs, seckill.ReasonPoison)
		})
	}
	out = make([]seckill.Outcome, 0, len(reqs))
	half := len(reqs) / 2
	for _, part := range [][]seckill.OrderRequest{reqs[:half], reqs[half:]} {
		o, err := w.applyOrIsolate(ctx, part, log)
		if err != nil {
			return nil, err
		}
		out = append(out, o...)
	}
	return out, nil
}

// retry calls f until it succeeds or ctx ends. After a few failures it
// checks whether the failure is the database's or Redis' being away (keep
// waiting) or f's own (give up after attempts, returning f's error).
func retry[T any](ctx context.Context, log *slog.Logger, f func(context.Context) (T, error)) (T, error) {
	const attempts = 3
	b := newBackoff()
	var zero T
	for i := 0; ; i++ {
		v, err := f(ctx)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, errors.Join(err, ctx.Err())
		}
		if i >= attempts && !transient(err) {
			return zero, err
		}
		if i >= attempts && i%10 == attempts {
			// retried without end: say so, or a stalled worker is silent
			log.Warn("still failing; retrying", "attempts", i+1, "err", err)
		}
		b.sleep(ctx)
	}
}

// transient reports errors of the connection rather than of the request.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s := strings.ToLower(err.Error())
	for _, m := range []string{"connection refused", "connection reset", "broken pipe", "i/o timeout",
		"eof", "no such host", "server closed", "bad connection", "too many connections", "driver: bad",
		"shutting down", "loading", "closed pool", "network is unreachable", "timeout",
		"sqlite_busy", "database is locked"} { // SQLite: another writer held the lock past the busy timeout
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// drainContext returns a context that stays alive for grace after parent
// ends, so a batch in hand can still be committed and acknowledged.
func drainContext(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stop(); cancel() }
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Millisecond} }
func (b *backoff) reset()  { b.d = 50 * time.Millisecond }

// sleep waits the current delay with jitter, doubling it up to 2s.
func (b *backoff) sleep(ctx context.Context) {
	d := b.d/2 + rand.N(b.d/2+1)
	b.d = min(2*b.d, 2*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
