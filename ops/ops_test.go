package ops_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/ops"
)

// The rules are valid for Prometheus, and their unit tests (each alert
// fires on its case and stays quiet on a near miss) pass.
func TestPromtool(t *testing.T) {
	testenv.NeedBinary(t, "promtool") // Debian: apt-get install prometheus
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yml"},
		{"test", "rules", "prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command("promtool", args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert the issue asks for is there, with a severity, a summary and a
// description, and each is unit-tested.
func TestRules(t *testing.T) {
	r, err := ops.ParseRules(ops.AlertRules)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			names = append(names, rule.Alert)
			if rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("%s: wants a severity, a summary and a description", rule.Alert)
			}
			if len(ops.MetricNames(rule.Expr)) == 0 {
				t.Errorf("%s: %q uses no seckill metric", rule.Alert, rule.Expr)
			}
			if !strings.Contains(string(tests), "alertname: "+rule.Alert+"\n") {
				t.Errorf("%s: no unit test in alerts_test.yml", rule.Alert)
			}
		}
	}
	for _, want := range []string{"SeckillOrderBacklogGrowing", "SeckillWorkerLag", "SeckillActivityRebuilt",
		"SeckillHTTP5xx", "SeckillRedisMemoryNearLimit"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// The dashboard imports into Grafana: valid JSON, unique panel ids, panels
// inside the 24-column grid without overlapping, every query on the
// datasource variable.
func TestGrafanaDashboard(t *testing.T) {
	d, err := ops.ParseDashboard(ops.GrafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v ops.Variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("no datasource variable of type prometheus")
	}
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want targets on the ${datasource} variable", p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] || q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a target without an expression, or a refId used twice, or another datasource: %+v", p.Title, q)
			}
			refs[q.RefID] = true
			if len(ops.MetricNames(q.Expr)) == 0 {
				t.Errorf("panel %q: %q uses no seckill metric", p.Title, q.Expr)
			}
		}
	}
}

func TestMetricNames(t *testing.T) {
	got := ops.MetricNames(`histogram_quantile(0.99, sum by (le) (rate(seckill_http_request_seconds_bucket{route="grab"}[5m])))
		/ (seckill_redis_memory_max_bytes > 0) + go_goroutines + process_cpu_seconds_total + seckill_redis_memory_max_bytes`)
	want := []string{"go_goroutines", "process_cpu_seconds_total", "seckill_http_request_seconds_bucket", "seckill_redis_memory_max_bytes"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
