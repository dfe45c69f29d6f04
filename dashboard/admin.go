package dashboard

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/compare"
)

// checkTimeout bounds one run of the checker, which reads every order of
// the activity.
const checkTimeout = 30 * time.Second

// check runs the invariant checker (package check) on one activity, from
// the database and Redis, and answers its report. Admin only, one run at a
// time: it reads every order of the activity.
func (d *Dashboard) check(w http.ResponseWriter, r *http.Request) {
	if !d.isAdmin(r) {
		writeError(w, http.StatusUnauthorized, seckill.EUNAUTHORIZED, "an admin bearer token is required")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, seckill.EINVALID, "activity id must be a positive integer")
		return
	}
	if d.cfg.DBURL == "" {
		writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "this dashboard has no database URL to check against")
		return
	}
	select {
	case d.checks <- struct{}{}:
		defer func() { <-d.checks }()
	default:
		writeError(w, http.StatusServiceUnavailable, seckill.EUNAVAILABLE, "a check is running; try again when it is done")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	if _, err := d.cfg.Store.Activity(ctx, id); err != nil {
		if seckill.ErrorCode(err) == seckill.ENOTFOUND {
			writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "activity "+strconv.FormatInt(id, 10)+" not found")
			return
		}
		d.unavailable(w, "read the activity", err)
		return
	}
	db, err := check.Open(ctx, d.cfg.DBURL)
	if err != nil {
		d.unavailable(w, "open the database", err)
		return
	}
	defer db.Close()
	// Without the users' answers, the checks that compare them with the
	// database (I3, I4, one order id per user) report themselves skipped.
	rep, err := check.Run(ctx, check.Config{DB: db, Redis: d.cfg.Engine.Client(), Prefix: d.cfg.Engine.Prefix(), ActivityID: id})
	if err != nil {
		d.unavailable(w, "run the checker", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (d *Dashboard) unavailable(w http.ResponseWriter, what string, err error) {
	d.cfg.Log.Warn("dashboard: "+what, "err", err)
	writeError(w, http.StatusServiceUnavailable, seckill.EUNAVAILABLE, "could not "+what+": "+err.Error())
}

// compare answers the results `seckill bench --compare --results` saved.
func (d *Dashboard) compare(w http.ResponseWriter, r *http.Request) {
	const hint = "run `seckill bench --compare --results FILE` and serve with --compare-results FILE"
	if d.cfg.CompareResults == "" {
		writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "no comparison results configured: "+hint)
		return
	}
	t, err := compare.Load(d.cfg.CompareResults)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, seckill.ENOTFOUND, "no comparison results in "+d.cfg.CompareResults+" yet: "+hint)
	case err != nil:
		writeError(w, http.StatusNotFound, seckill.ENOTFOUND, err.Error())
	default:
		writeJSON(w, http.StatusOK, t)
	}
}
