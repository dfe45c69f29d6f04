package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/ops"
)

// Every metric the Grafana dashboard and the alerting rules of ops/ use is
// one that serve exports, read from the /metrics of a serve on real Redis
// and PostgreSQL after a sale and a join of a waiting room (labelled
// series appear once used).
func TestOpsKitMetricNames(t *testing.T) {
	in := startServe(t, backend{name: "postgres", redisURL: "redis://" + testenv.RedisAddr(t),
		dbURL: testenv.PostgresURL(t)}, testenv.Prefix(t))
	id := in.createActivity(5, 0)
	orders := map[string]int64{}
	for uid := int64(1); uid <= 7; uid++ {
		if r := in.grab(id, uid); r.status == http.StatusAccepted {
			orders[r.body["order_id"].(string)] = uid
		}
	}
	in.waitOrders(orders)
	// A sale behind a waiting room, joined: the room's series.
	now := time.Now()
	body := fmt.Sprintf(`{"name":"queued","stock":5,"starts_at":%q,"ends_at":%q,"queue":{"rate":10}}`,
		now.Add(-time.Second).Format(time.RFC3339Nano), now.Add(time.Hour).Format(time.RFC3339Nano))
	q := in.do("POST", "/api/v1/activities", in.admin(), body)
	if q.status != http.StatusCreated {
		t.Fatalf("create a sale with a waiting room: %d %v", q.status, q.body)
	}
	if j := in.do("POST", fmt.Sprintf("/api/v1/activities/%d/queue", int64(q.body["id"].(float64))), user(1), ""); j.status != http.StatusOK {
		t.Fatalf("join: %d %v", j.status, j.body)
	}

	var families map[string]*dto.MetricFamily
	parser := expfmt.NewTextParser(model.UTF8Validation)
	testenv.WaitFor(t, "the stream gauges of the sale", func() bool {
		req, _ := http.NewRequest(http.MethodGet, in.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+in.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if families, err = parser.TextToMetricFamilies(resp.Body); err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		return families["seckill_stream_pending"] != nil && families["seckill_queue_joined_total"] != nil
	})
	exported := func(name string) bool {
		if families[name] != nil {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f := families[strings.TrimSuffix(name, suffix)]; strings.HasSuffix(name, suffix) && f != nil &&
				f.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
		return false
	}
	exprs, err := ops.Exprs()
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, e := range exprs {
		for _, name := range ops.MetricNames(e) {
			used++
			if !exported(name) {
				t.Errorf("%s is not exported by serve (used by %q)", name, e)
			}
		}
	}
	if used < 30 {
		t.Fatalf("only %d metric references found in the kit", used)
	}
}
