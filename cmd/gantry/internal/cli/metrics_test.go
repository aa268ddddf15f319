package cli

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeFamilies reads the metrics at url with the Prometheus text parser
// (names and labels checked as Prometheus itself checks them, the legacy
// scheme every scraper reads).
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the metrics at %s do not parse: %v", url, err)
	}
	return fams
}

// counterOf is the value of a counter's series with exactly these labels.
func counterOf(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if match {
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// gantryName is what gantry's own metrics are named: gantry_, a
// lowercase snake-case name, counters ending in _total.
var gantryName = regexp.MustCompile(`^gantry_[a-z][a-z0-9_]*[a-z0-9]$`)

// TestMetricsOfARun: a real dev stack's /metrics, read by the Prometheus
// text parser, has gantry_build_info{version, commit, go} 1, every gantry
// metric well named, and counts nodes by status and operation as they
// ended: the nodes of a formula the planner blocked (no executor ran
// them) as blocked, and a check run's nodes under operation="check", not
// among the creates that succeeded.
func TestMetricsOfARun(t *testing.T) {
	s := startDevStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := metricsserve.Start(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + metricsserve.Path
	fails := compositionFile(t, "fails.yaml", `name: fails
hosts: {me: {transport: local}}
formulas:
  - id: a
    server: me
    nodes: [{name: n, run: 'exit 3'}]
  - id: b
    server: me
    depends_on: [a]
    nodes: [{name: x, run: 'true'}, {name: y, run: 'true'}]
`)
	check := compositionFile(t, "check.yaml", "name: checked\noperation: check\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'true', check: 'true'}]\n")
	series := func(status, op string) map[string]string { return map[string]string{"status": status, "operation": op} }
	want := []struct {
		labels map[string]string
		delta  float64
	}{
		{series("blocked", "create"), 2},
		{series("failed", "create"), 1},
		{series("succeeded", "create"), 0},
		{series("skipped", "create"), 0},
		{series("succeeded", "check"), 1}, // its check ran (and found it ok)
	}
	before := scrapeFamilies(t, url)
	for _, f := range []string{fails, check} {
		if code, out, errOut := s.gantry(t, "submit", f, "--watch"); code == ExitProblem || code == ExitUsage {
			t.Fatalf("submit %s: exit %d\n%s%s", f, code, out, errOut)
		}
	}
	var after map[string]*dto.MetricFamily
	var diff []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after, diff = scrapeFamilies(t, url), nil
		for _, w := range want {
			if got := counterOf(after, "gantry_node_results_total", w.labels) - counterOf(before, "gantry_node_results_total", w.labels); got != w.delta {
				diff = append(diff, fmt.Sprintf("gantry_node_results_total%v +%g, want +%g", w.labels, got, w.delta))
			}
		}
		if len(diff) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, d := range diff {
		t.Error(d)
	}
	bi := after[metricsserve.BuildInfoName]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("no gantry_build_info gauge of 1: %v", bi)
	}
	labels := map[string]string{}
	for _, l := range bi.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != buildinfo.Version() || labels["commit"] != buildinfo.Commit() || labels["go"] != runtime.Version() || len(labels) != 3 {
		t.Errorf("gantry_build_info labels %v", labels)
	}
	for name, f := range after {
		if !strings.HasPrefix(name, "gantry_") {
			continue
		}
		if !gantryName.MatchString(name) || f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") || f.GetHelp() == "" {
			t.Errorf("metric %s (%s): a gantry metric is gantry_snake_case, a counter ends in _total, and each has help", name, f.GetType())
		}
	}
}

// gantry dev serves its metrics at one endpoint: the web view's /metrics
// only when --metrics does not serve them elsewhere.
func TestDevWebViewMetricsOnlyWithoutMetricsFlag(t *testing.T) {
	t.Parallel()
	if webViewMetrics("127.0.0.1:9464") != nil {
		t.Error("gantry dev --http --metrics serves /metrics twice")
	}
	if webViewMetrics("") == nil {
		t.Error("gantry dev --http without --metrics serves no metrics")
	}
}
