package check

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of every check, with the figures they used. It
// marshals to JSON with encoding/json.
type Report struct {
	ActivityID  int64 `json:"activity_id"`
	Stock       int64 `json:"stock"`
	DBRemaining int64 `json:"db_remaining"`
	// Orders by state in the database. Confirmed and Paid hold units (see
	// Sold); Cancelled and Expired gave theirs back.
	Confirmed int64 `json:"confirmed"`
	Paid      int64 `json:"paid"`
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
	Failed    int64 `json:"failed"`
	// ReturnsPending counts returned units whose Redis half is not
	// recorded as done yet.
	ReturnsPending int64 `json:"returns_pending"`
	// RedisRemaining is nil without Redis or when it holds no remaining stock of the activity.
	RedisRemaining *int64 `json:"redis_remaining,omitempty"`
	// Pending counts accepted grabs whose stream entry is not yet
	// acknowledged; nil without Redis.
	Pending *int64   `json:"pending,omitempty"`
	Results []Result `json:"results"`
}

// Result is the verdict of one check.
type Result struct {
	Name string `json:"name"`
	// Held is true if no violation was found (and for a skipped check).
	Held bool `json:"held"`
	// Skipped is set when the check lacked its input (Redis or answers).
	Skipped bool `json:"skipped,omitempty"`
	// Count is the number of violations (orders, users or units of stock,
	// as Detail says); 0 when Held.
	Count  int64  `json:"count"`
	Detail string `json:"detail"`
}

// Sold is the number of units the database holds sold: confirmed and paid
// orders.
func (r *Report) Sold() int64 { return r.Confirmed + r.Paid }

// OK reports whether every check held.
func (r *Report) OK() bool {
	for _, c := range r.Results {
		if !c.Held {
			return false
		}
	}
	return true
}

// Result returns the result of the named check.
func (r *Report) Result(name string) (Result, bool) {
	for _, c := range r.Results {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}

// Err returns nil if every check held, else an error naming each failure.
func (r *Report) Err() error {
	var errs []error
	for _, c := range r.Results {
		if !c.Held {
			errs = append(errs, fmt.Errorf("%s: %d violations: %s", c.Name, c.Count, c.Detail))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("check: activity %d: %w", r.ActivityID, errors.Join(errs...))
}

// WriteTable prints one line per check: verdict, name, count and detail.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "CHECK\tRESULT\tCOUNT\tDETAIL\n")
	for _, c := range r.Results {
		verdict := "ok"
		switch {
		case c.Skipped:
			verdict = "skipped"
		case !c.Held:
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Name, verdict, c.Count, c.Detail)
	}
	verdict := "all invariants held"
	if !r.OK() {
		var failed []string
		for _, c := range r.Results {
			if !c.Held {
				failed = append(failed, c.Name)
			}
		}
		verdict = "VIOLATED: " + strings.Join(failed, ", ")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "activity %d: %s\n", r.ActivityID, verdict)
	return err
}
