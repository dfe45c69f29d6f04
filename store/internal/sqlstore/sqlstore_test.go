package sqlstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/seckilldev/seckill"
)

var (
	confirmed = seckill.Outcome{Status: seckill.OrderConfirmed}
	soldOut   = seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonSoldOut}
)

func dup(id int64) seckill.Outcome {
	return seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonDuplicate, ExistingOrderID: id}
}

func TestApply(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 123_456_789, time.UTC)
	at := time.Date(2030, 1, 1, 1, 0, 0, 999_999_999, time.FixedZone("UTC+1", 3600))
	r := func(order, activity, user int64) seckill.OrderRequest {
		return seckill.OrderRequest{OrderID: order, ActivityID: activity, UserID: user, CreatedAt: at}
	}
	f := NewFacts(0)
	f.Remaining[1] = 2
	f.Remaining[2] = 0
	f.Outcomes[10] = confirmed
	f.Outcomes[11] = soldOut
	f.Holders[Key{1, 100}] = 10
	f.PayWithin[1] = 90 * time.Second

	reqs := []seckill.OrderRequest{
		r(10, 1, 100), // redelivered: confirmed
		r(11, 1, 101), // redelivered: its failure
		r(12, 1, 100), // user holds 10
		r(14, 1, 102), // takes the first unit
		r(13, 1, 102), // same user in the batch
		r(14, 1, 102), // same order in the batch
		r(15, 2, 103), // activity without stock
		r(16, 3, 104), // activity that does not exist
		r(17, 1, 105), // takes the last unit
		r(18, 1, 106), // none left
		{OrderID: 19, ActivityID: 1, UserID: 100}, // no CreatedAt, holder first
	}
	p := Apply(reqs, f, now)
	want := []seckill.Outcome{confirmed, soldOut, dup(10), confirmed, dup(14), confirmed, soldOut, soldOut, confirmed, soldOut, dup(10)}
	if !slices.Equal(p.Outcomes, want) {
		t.Errorf("outcomes:\n got %v\nwant %v", p.Outcomes, want)
	}
	if got := p.Take; !slices.Equal(got, []Take{{ActivityID: 1, N: 2}}) {
		t.Errorf("take = %v, want 2 of activity 1", got)
	}
	var confirmedIDs, failedIDs []int64
	for _, c := range p.Confirm {
		confirmedIDs = append(confirmedIDs, c.OrderID)
		if !c.CreatedAt.Equal(time.Date(2030, 1, 1, 0, 0, 0, 999_000_000, time.UTC)) || c.CreatedAt.Location() != time.UTC {
			t.Errorf("order %d: CreatedAt = %v, want UTC truncated to ms", c.OrderID, c.CreatedAt)
		}
		if want := time.Date(2030, 1, 1, 0, 1, 30, 123_000_000, time.UTC); !c.PayBy.Equal(want) || c.PayBy.Location() != time.UTC {
			t.Errorf("order %d: PayBy = %v, want now + 90s (%v), truncated to ms", c.OrderID, c.PayBy, want)
		}
	}
	for _, f := range p.Fail {
		failedIDs = append(failedIDs, f.Req.OrderID)
	}
	if !slices.Equal(confirmedIDs, []int64{14, 17}) || !slices.Equal(failedIDs, []int64{12, 13, 15, 16, 18, 19}) {
		t.Errorf("rows: confirm %v, fail %v; want [14 17] and [12 13 15 16 18 19], sorted", confirmedIDs, failedIDs)
	}
	if last := p.Fail[len(p.Fail)-1]; !last.Req.CreatedAt.Equal(Millis(now)) {
		t.Errorf("order 19: CreatedAt = %v, want now %v", last.Req.CreatedAt, Millis(now))
	}
}

func TestFail(t *testing.T) {
	f := NewFacts(0)
	f.Outcomes[1] = confirmed
	f.Outcomes[2] = soldOut
	reqs := []seckill.OrderRequest{{OrderID: 3}, {OrderID: 1}, {OrderID: 2}, {OrderID: 3}}
	p := Fail(reqs, seckill.ReasonPoison, f, time.Now())
	poison := seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonPoison}
	if want := []seckill.Outcome{poison, confirmed, soldOut, poison}; !slices.Equal(p.Outcomes, want) {
		t.Errorf("outcomes = %v, want %v", p.Outcomes, want)
	}
	if len(p.Fail) != 1 || p.Fail[0].Req.OrderID != 3 || len(p.Confirm) != 0 || len(p.Take) != 0 {
		t.Errorf("plan = %+v, want one failure row for order 3", p)
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	errRetry := errors.New("retry me")
	never := func(error) bool { return false }
	only := func(err error) bool { return errors.Is(err, errRetry) }

	runs := 0
	err := Retry(ctx, never, func() error {
		runs++
		if runs < 3 {
			return ErrConflict
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Errorf("conflicts then success: err %v after %d runs, want nil after 3", err, runs)
	}

	runs = 0
	err = Retry(ctx, only, func() error { runs++; return errRetry })
	if !errors.Is(err, errRetry) || runs != MaxAttempts {
		t.Errorf("persistent: err %v after %d runs, want %v after %d", err, runs, errRetry, MaxAttempts)
	}

	runs = 0
	errOther := errors.New("permanent")
	err = Retry(ctx, only, func() error { runs++; return errOther })
	if err != errOther || runs != 1 {
		t.Errorf("permanent: err %v after %d runs, want it at once", err, runs)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = Retry(cctx, only, func() error { return errRetry })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
}

func TestCeilMillis(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 5_000_000, time.UTC)
	for _, tt := range []struct{ in, want time.Time }{
		{base, base},
		{base.Add(1), base.Add(time.Millisecond)},
		{base.Add(-1), base},
		{base.In(time.FixedZone("X", 3600)), base},
	} {
		if got := CeilMillis(tt.in); !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("CeilMillis(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParams(t *testing.T) {
	if got := Params(3); got != "?,?,?" {
		t.Errorf("Params(3) = %q", got)
	}
	if got := Rows("(?, ?)", 2); got != "(?, ?),(?, ?)" {
		t.Errorf("Rows = %q", got)
	}
}

func TestDollar(t *testing.T) {
	got := Dollar("SELECT a FROM t WHERE x BETWEEN ? AND ? OR y = ?")
	if want := "SELECT a FROM t WHERE x BETWEEN $1 AND $2 OR y = $3"; got != want {
		t.Errorf("Dollar = %q, want %q", got, want)
	}
}

func TestPayBy(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 123_456_789, time.FixedZone("UTC+1", 3600))
	if got := PayBy(now, 0); !got.IsZero() {
		t.Errorf("PayBy(no window) = %v, want zero", got)
	}
	if got := PayBy(now, time.Minute); !got.Equal(now.Add(time.Minute).Truncate(time.Millisecond)) || got.Location() != time.UTC {
		t.Errorf("PayBy = %v", got)
	}
}

// TestTimeDest: what each engine's driver hands over for a time column.
func TestTimeDest(t *testing.T) {
	want := time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	for _, v := range []any{want.In(time.FixedZone("X", 3600)), "2030-01-02 03:04:05.678", []byte("2030-01-02 03:04:05.678")} {
		var got time.Time
		if err := TimeDest(&got).Scan(v); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("Scan(%T %v) = %v, %v; want %v in UTC", v, v, got, err, want)
		}
	}
	got := want
	if err := TimeDest(&got).Scan(nil); err != nil || !got.IsZero() {
		t.Errorf("Scan(NULL) = %v, %v; want the zero time", got, err)
	}
	for _, v := range []any{int64(5), "yesterday"} {
		if err := TimeDest(&got).Scan(v); err == nil {
			t.Errorf("Scan(%v) succeeded", v)
		}
	}
}

// TestTimeText: the text SQLite stores is what Format makes of the time in
// UTC, whatever its zone, year or fraction.
func TestTimeText(t *testing.T) {
	zone := time.FixedZone("UTC+8", 8*3600)
	times := []time.Time{
		time.Date(2030, 1, 2, 3, 4, 5, 678_999_999, zone),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		times = append(times, time.Unix(r.Int64N(1<<36), r.Int64N(1e9)).In(zone))
	}
	for _, tm := range times {
		if got, want := TimeText(tm), tm.UTC().Format(TimeFormat); got != want {
			t.Errorf("TimeText(%v) = %q, want %q", tm, got, want)
		}
	}
}

func TestMigrationsUpTo(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("A")}, "m/0002_b.sql": {Data: []byte("B")}, "m/0003_c.sql": {Data: []byte("C")}, "m/notes.txt": {},
	}
	for upTo, want := range map[string]string{"": "0001_a 0002_b 0003_c", "0002_b": "0001_a 0002_b", "0001_a": "0001_a"} {
		ms, err := Migrations(fsys, "m", upTo)
		var got []string
		for _, m := range ms {
			got = append(got, m.Version)
		}
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("Migrations(up to %q) = %v, %v; want %s", upTo, got, err, want)
		}
	}
}

func TestValidPayment(t *testing.T) {
	for _, tt := range []struct {
		p  seckill.Payment
		ok bool
	}{
		{seckill.Payment{Ref: "r"}, true},
		{seckill.Payment{Ref: "支付-123", Key: "é"}, true},
		{seckill.Payment{Ref: strings.Repeat("r", MaxRef), Key: strings.Repeat("k", MaxRef)}, true},
		{seckill.Payment{}, false},
		{seckill.Payment{Ref: strings.Repeat("r", MaxRef+1)}, false},
		{seckill.Payment{Ref: "r", Key: strings.Repeat("k", MaxRef+1)}, false},
		{seckill.Payment{Ref: "a\nb"}, false},
		{seckill.Payment{Ref: "r", Key: "\x7f"}, false},
		{seckill.Payment{Ref: "\xc3"}, false},
	} {
		err := validPayment(tt.p)
		if (err == nil) != tt.ok || (err != nil && seckill.ErrorCode(err) != seckill.EINVALID) {
			t.Errorf("validPayment(%q, %q) = %v, want ok %v", tt.p.Ref, tt.p.Key, err, tt.ok)
		}
	}
}

// TestLookup: ids close together are looked up as their range, skipping the
// range's other rows; ids far apart as a list.
func TestLookup(t *testing.T) {
	dense := lookup([]int64{105, 101, 103, 102})
	if got := dense.cond("id"); got != "id BETWEEN ? AND ?" || !slices.Equal(dense.args, []any{int64(101), int64(105)}) {
		t.Errorf("dense ids: %s %v", got, dense.args)
	}
	if !dense.has(103) || dense.has(104) {
		t.Errorf("dense ids: has(103) = %v, has(104) = %v", dense.has(103), dense.has(104))
	}
	sparse := lookup([]int64{1, 100, 7})
	if got := sparse.cond("id"); got != "id IN (?,?,?)" || !slices.Equal(sparse.args, []any{int64(1), int64(100), int64(7)}) || !sparse.has(8) {
		t.Errorf("sparse ids: %s %v", got, sparse.args)
	}
	if got := lookup(nil).cond("id"); got != "1 = 0" {
		t.Errorf("no ids: %s", got)
	}
}
