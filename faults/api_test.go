package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckilldev/seckill/faults/internal/cluster"
)

// TestAPIKilledUnderLoad: each of two API instances is killed with kill -9
// in the middle of the sale, with requests in flight (some of them grabs
// that Redis accepted but whose answer never left), and restarted on its
// address half a second later. Every order answered must end in the
// database; an order nobody was told about must belong to a user whose
// request failed (I4's "unknown outcome"), never to someone else.
func TestAPIKilledUnderLoad(t *testing.T) {
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800})
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		for k, a := range e.c.APIs() {
			if !waitAccepted(ctx, p, int64(k+1)*e.stock/3) {
				return
			}
			a.Proc().Kill()
			e.fault("API kill -9", "%s at %d accepted grabs", a.Name, p.Accepted())
			time.Sleep(500 * time.Millisecond)
			if err := e.c.RestartAPI(ctx, a); err != nil {
				t.Errorf("restart %s: %v", a.Name, err)
				return
			}
			e.logf("%s restarted", a.Name)
		}
	})
	requireHeld(t, out.report)
	if e.faults.Get("API kill -9") < 2 {
		t.Errorf("the fault was not injected: %d kills, want 2", e.faults.Get("API kill -9"))
	}
	if c := out.crowd.Counts; c.Errors+c.Timeouts == 0 {
		t.Errorf("no request failed although API instances were killed under load")
	}
}
