package compare

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckilldev/seckill/loadgen"
)

// Table is the result of a comparison. It marshals to JSON with
// encoding/json (durations in nanoseconds).
type Table struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	Rows     []Row     `json:"rows"`
	// Note is printed under the table: what the figures may be compared
	// with, and how.
	Note string `json:"note"`
}

// Machine describes where the comparison ran.
type Machine struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	// LoadAvg is /proc/loadavg at the start, where there is one: the
	// machine is shared, and this says how busy it already was.
	LoadAvg string `json:"loadavg,omitempty"`
}

// Settings are the parameters every strategy ran with.
type Settings struct {
	Database    string        `json:"database"` // postgres, mysql or sqlite
	Stock       int64         `json:"stock"`
	Items       int           `json:"items"`
	Users       int           `json:"users"`
	Concurrency int           `json:"concurrency"`
	RepeatShare float64       `json:"repeat_share"`
	Requests    int64         `json:"requests"`
	Duration    time.Duration `json:"duration_cap_ns"`
	Rounds      int           `json:"rounds"`
	LockWait    time.Duration `json:"lock_wait_ns"`
	LockTTL     time.Duration `json:"lock_ttl_ns"`
	Seed        uint64        `json:"seed"`
}

// Row is one strategy's line: its rounds, and their medians.
type Row struct {
	Strategy string `json:"strategy"`
	// Safe: the strategy is meant never to oversell nor to sell twice.
	Safe bool `json:"safe_by_design"`
	// Throughput, P50, P99, CPU and RedisCPU are the medians of the
	// rounds.
	Throughput float64       `json:"requests_per_sec"`
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
	CPU        float64       `json:"cpu_cores"`
	RedisCPU   float64       `json:"redis_cpu_cores"`
	// Ratio is Throughput over global-lock's in the same run (0 without a
	// global-lock row).
	Ratio float64 `json:"ratio_to_global_lock,omitempty"`
	// Worst indexes the round that broke the rules most: the most
	// oversold, then the most duplicates (the first round if none did).
	Worst  int     `json:"worst_round"`
	Rounds []Round `json:"rounds"`
	// Seeds is the seeds' figure for the same lock granularity, if any.
	Seeds *SeedFigure `json:"seeds,omitempty"`
}

// Round is one measurement of a strategy: one fresh sale, one crowd.
type Round struct {
	// Throughput counts every answer per second, sold_out ones included,
	// as JMeter's QPS does.
	Throughput float64       `json:"requests_per_sec"`
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// Requests and Answers are what the crowd sent and was told.
	Requests int64          `json:"requests"`
	Answers  loadgen.Counts `json:"answers"`
	// UsersToldTwoOrders counts users answered with two different order
	// ids: double sales seen from the outside.
	UsersToldTwoOrders int64 `json:"users_told_two_orders"`
	// CPU is the cores this process (load generator, service, and SQLite
	// when it is the database) kept busy during the crowd, RedisCPU those
	// of Redis: a strategy well below the machine's cores is waiting on a
	// lock or a round trip, not on the CPU.
	CPU      float64 `json:"cpu_cores"`
	RedisCPU float64 `json:"redis_cpu_cores"`
	// Tally is what the round's sale really sold.
	Tally
}

// SeedFigure is a line of the seeds' table (section 4.2): 4 cores, 8 GB,
// JMeter with 500 concurrent users for 100 units, one Redis. The seeds give
// no oversell counts.
type SeedFigure struct {
	Lock  string  `json:"lock"`
	QPS   float64 `json:"qps"`
	Ratio float64 `json:"ratio_to_global_lock"`
}

// Seeds holds the seeds' figures by the strategy of the same granularity.
var Seeds = map[string]SeedFigure{
	GlobalLock:   {Lock: "lock:seckill", QPS: 3200, Ratio: 1},
	ActivityLock: {Lock: "lock:goods:1001", QPS: 18500, Ratio: 18500.0 / 3200},
	UserLock:     {Lock: "lock:user:888", QPS: 42000, Ratio: 42000.0 / 3200},
}

func newRound(rep *loadgen.Report, t Tally) Round {
	r := Round{
		Throughput:         rep.Throughput,
		P50:                rep.Latency.P50,
		P99:                rep.Latency.P99,
		Elapsed:            rep.Elapsed,
		Requests:           rep.Requests,
		Answers:            rep.Counts,
		UsersToldTwoOrders: rep.UsersConflicting,
		Tally:              t,
	}
	if n := rep.Counts.Errors + rep.Counts.Timeouts + rep.Counts.Other; n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d requests without a proper answer (errors %d, timeouts %d, other %d)",
			n, rep.Counts.Errors, rep.Counts.Timeouts, rep.Counts.Other))
	}
	if rep.UsersConflicting > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d users were told two different order ids", rep.UsersConflicting))
	}
	return r
}

func newRow(strategy string, rounds []Round) Row {
	r := Row{Strategy: strategy, Safe: Safe(strategy), Rounds: rounds}
	r.Throughput = median(rounds, func(x Round) float64 { return x.Throughput })
	r.P50 = time.Duration(median(rounds, func(x Round) float64 { return float64(x.P50) }))
	r.P99 = time.Duration(median(rounds, func(x Round) float64 { return float64(x.P99) }))
	r.CPU = median(rounds, func(x Round) float64 { return x.CPU })
	r.RedisCPU = median(rounds, func(x Round) float64 { return x.RedisCPU })
	for i, x := range rounds {
		w := rounds[r.Worst]
		if x.Oversold > w.Oversold || x.Oversold == w.Oversold && x.Duplicates > w.Duplicates {
			r.Worst = i
		}
	}
	if f, ok := Seeds[strategy]; ok {
		r.Seeds = &f
	}
	return r
}

// median returns the median of f over rounds (the mean of the middle two
// for an even count).
func median(rounds []Round, f func(Round) float64) float64 {
	v := make([]float64, len(rounds))
	for i, r := range rounds {
		v[i] = f(r)
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func (b *Bench) newTable() *Table {
	c := b.cfg
	t := &Table{
		Started: time.Now(),
		Machine: Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version()},
		Settings: Settings{Database: b.d.name, Stock: c.Stock, Items: c.Items, Users: c.Users,
			Concurrency: c.Concurrency, RepeatShare: c.RepeatShare, Requests: c.Requests, Duration: c.Duration,
			Rounds: c.Rounds, LockWait: c.LockWait, LockTTL: c.LockTTL, Seed: c.Seed},
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(la))
		t.Machine.LoadAvg = strings.Join(f[:min(3, len(f))], " ")
	}
	return t
}

// finish sets the ratios and the note.
func (t *Table) finish() {
	var base float64
	for _, r := range t.Rows {
		if r.Strategy == GlobalLock {
			base = r.Throughput
		}
	}
	for i := range t.Rows {
		if base > 0 {
			t.Rows[i].Ratio = t.Rows[i].Throughput / base
		}
	}
	s, m := t.Settings, t.Machine
	t.Note = fmt.Sprintf(`The seeds (section 4.2) measured on 4 cores / 8 GB with JMeter, 500 concurrent users for 100 units and one Redis: global lock 3,200 QPS, item lock 18,500 (5.8x), user lock 42,000 (13.1x), and gave no oversell counts. This run: %d CPUs (GOMAXPROCS %d) shared by the load generator, the service, Redis and %s, and by whatever else runs on the machine (load average %s at the start); %d connections, %d users, %d units over %d items, %d requests per round (cap %s), %d rounds. Absolute rates do not carry over between such machines: compare each strategy by its ratio to global-lock in the same run. req/s counts every answer, sold_out included, as JMeter does; sold, oversold and dup users are counted in the database and Redis after the crowd, not taken from the answers.`,
		m.CPUs, m.GOMAXPROCS, s.Database, orUnknown(m.LoadAvg), s.Concurrency, s.Users, s.Stock, s.Items,
		s.Requests, s.Duration, s.Rounds)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Write prints the table, the notes of each strategy's worst round and
// the note.
func (t *Table) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	s := t.Settings
	fmt.Fprintf(ew, "seckill bench --compare  %s  %s/%s, %d CPUs, %s, database %s\n",
		t.Started.Format(time.DateTime), t.Machine.OS, t.Machine.Arch, t.Machine.CPUs, t.Machine.Go, s.Database)
	fmt.Fprintf(ew, "%d units over %d items; %d users on %d connections, %.0f%% repeat clicks until all have clicked, then repeats only;\n",
		s.Stock, s.Items, s.Users, s.Concurrency, 100*s.RepeatShare)
	fmt.Fprintf(ew, "%s requests per round (cap %s), rounds per strategy: %d; req/s, p50, p99, cpu are medians, counts are per round;\n",
		thousands(s.Requests), s.Duration, s.Rounds)
	fmt.Fprintf(ew, "cpu+redis: cores kept busy by this process (generator and service) and by Redis, of %d\n\n", t.Machine.CPUs)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "strategy\tsafe\treq/s\tx global\tp50\tp99\tcpu+redis\tstock\tsold\toversold\tdup users\tbusy\tseeds req/s (x)\t\n")
	for _, r := range t.Rows {
		safe := "no"
		if r.Safe {
			safe = "yes"
		}
		ratio := "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		seeds := "-"
		if r.Seeds != nil {
			seeds = fmt.Sprintf("%s (%.1f)", thousands(int64(r.Seeds.QPS)), r.Seeds.Ratio)
		}
		per := func(f func(Round) int64) string {
			v := make([]string, len(r.Rounds))
			for i, x := range r.Rounds {
				v[i] = strconv.FormatInt(f(x), 10)
			}
			return strings.Join(v, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f+%.1f\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Strategy, safe,
			thousands(int64(r.Throughput+0.5)), ratio, ms(r.P50), ms(r.P99), r.CPU, r.RedisCPU, r.Rounds[0].Stock,
			per(func(x Round) int64 { return x.Sold }),
			per(func(x Round) int64 { return x.Oversold }),
			per(func(x Round) int64 { return x.Duplicates }),
			per(func(x Round) int64 { return x.Answers.Unavailable }), seeds)
	}
	_ = tw.Flush()
	fmt.Fprintln(ew)
	for _, r := range t.Rows {
		for _, n := range r.Rounds[r.Worst].Notes {
			fmt.Fprintf(ew, "  %-14s round %d: %s\n", r.Strategy+":", r.Worst+1, n)
		}
	}
	fmt.Fprintln(ew)
	fmt.Fprintln(ew, wrap(t.Note, 100))
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// thousands formats n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		if i > 0 {
			if n+1+len(word) > width {
				b.WriteByte('\n')
				n = 0
			} else {
				b.WriteByte(' ')
				n++
			}
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
