// Package ops is seckill's kit for operators, as files to deploy: a Grafana
// dashboard (grafana/seckill.json) and Prometheus alerting rules
// (prometheus/alerts.yml, unit-tested by prometheus/alerts_test.yml with
// promtool), written against the metrics that `seckill serve` and `seckill
// worker` export. The package embeds the files so that a test of the
// running service (cmd/seckill) checks every metric name they use against
// its /metrics.
package ops

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
)

// GrafanaDashboard is grafana/seckill.json.
//
//go:embed grafana/seckill.json
var GrafanaDashboard []byte

// AlertRules is prometheus/alerts.yml.
//
//go:embed prometheus/alerts.yml
var AlertRules []byte

// Dashboard is the part of a Grafana dashboard's JSON model the kit's tests
// read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// Panel is a dashboard panel.
type Panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource"`
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *Datasource `json:"datasource"`
	} `json:"targets"`
}

// Datasource names a panel's data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// ParseDashboard decodes a dashboard's JSON strictly enough to reject what
// Grafana would not import: invalid JSON, no panels, or a panel without an
// id or a type.
func ParseDashboard(b []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("ops: the dashboard is not valid JSON: %w", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		return nil, fmt.Errorf("ops: the dashboard needs a title, a uid and panels")
	}
	for _, p := range d.Panels {
		if p.ID == 0 || p.Type == "" {
			return nil, fmt.Errorf("ops: panel %q has no id or type", p.Title)
		}
	}
	return &d, nil
}

// Rules is a Prometheus rule file.
type Rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []Rule `yaml:"rules"`
	} `yaml:"groups"`
}

// Rule is an alerting rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ParseRules decodes a rule file (promtool checks the PromQL itself).
func ParseRules(b []byte) (*Rules, error) {
	var r Rules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("ops: the rules are not a rule file: %w", err)
	}
	return &r, nil
}

// Exprs returns every PromQL expression of the kit: the dashboard's
// targets, then the alerting rules.
func Exprs() ([]string, error) {
	d, err := ParseDashboard(GrafanaDashboard)
	if err != nil {
		return nil, err
	}
	r, err := ParseRules(AlertRules)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, t.Expr)
		}
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			out = append(out, rule.Expr)
		}
	}
	return out, nil
}

// metricName matches the names of the metrics a seckill process exports
// (its own, and the Go and process collectors'). In an expression nothing
// else has these prefixes: label names and functions do not.
var metricName = regexp.MustCompile(`\b(?:seckill|go|process)_[a-zA-Z0-9_]*[a-zA-Z0-9]\b`)

// MetricNames returns the metric names an expression uses, as written
// (a histogram's series with their _bucket, _sum or _count suffix).
func MetricNames(expr string) []string {
	names := metricName.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}
