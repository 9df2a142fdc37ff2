package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lookTool finds a binary of a Debian package. Without it the test is
// skipped, saying so, except in CI (CI=true), where .ci/run installs it
// and its absence fails the test rather than hide it.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not on PATH, and CI=true: .ci/run installs it (apt-get install %s)", name, pkg)
	}
	t.Skipf("%s not on PATH: skipping; install it with `apt-get install %s` (Debian) to run this test", name, pkg)
	return ""
}

// The rules are valid, and their unit tests (series that fire each alert
// at the end of its `for` window, and series that must not) pass.
func TestRules(t *testing.T) {
	promtool := lookTool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "prometheus/recording.rules.yml", "prometheus/alerts.rules.yml"},
		{"test", "rules", "prometheus/recording_test.yml", "prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

var (
	recordName = regexp.MustCompile(`(?m)^\s+- record: (\S+)\s*$`)
	alertName  = regexp.MustCompile(`(?m)^\s+- alert: (\S+)\s*$`)
	alertCase  = regexp.MustCompile(`(?m)^\s+alertname: (\S+)\s*\n\s+exp_alerts:(.*)$`)
	exprTest   = regexp.MustCompile(`(?m)^\s+- expr: `)
)

// tiers are the jobs of recording_test.yml: every recording rule's
// expected samples name both, so a rule that mixed one tier's series
// into another's figures, or dropped one, would fail its test.
var tiers = []string{`job="t"`, `job="u"`}

// Every recording rule has a promtool test of its value for each tier,
// and every alert a case where it must not fire and one where it fires.
func TestEveryRuleIsTested(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("prometheus", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	recordTests := read("recording_test.yml")
	records := recordName.FindAllStringSubmatch(read("recording.rules.yml"), -1)
	if len(records) == 0 {
		t.Fatal("recording.rules.yml: no rule")
	}
	// Each promql_expr_test from its `- expr:` line to the next.
	var cases []string
	starts := exprTest.FindAllStringIndex(recordTests, -1)
	for i, st := range starts {
		end := len(recordTests)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		cases = append(cases, recordTests[st[0]:end])
	}
	for _, m := range records {
		names := regexp.MustCompile(`^\s+- expr: .*\b` + regexp.QuoteMeta(m[1]) + `\b`)
		tested, bothTiers := false, false
		for _, c := range cases {
			if !names.MatchString(c) {
				continue
			}
			tested = true
			if strings.Contains(c, tiers[0]) && strings.Contains(c, tiers[1]) {
				bothTiers = true
			}
		}
		switch {
		case !tested:
			t.Errorf("recording rule %s: no promql_expr_test in recording_test.yml", m[1])
		case !bothTiers:
			t.Errorf("recording rule %s: no promql_expr_test in recording_test.yml expects samples of both %v", m[1], tiers)
		}
	}
	quiet, fires := map[string]bool{}, map[string]bool{}
	for _, m := range alertCase.FindAllStringSubmatch(read("alerts_test.yml"), -1) {
		if strings.TrimSpace(m[2]) == "[]" {
			quiet[m[1]] = true
		} else {
			fires[m[1]] = true
		}
	}
	alerts := alertName.FindAllStringSubmatch(read("alerts.rules.yml"), -1)
	if len(alerts) == 0 {
		t.Fatal("alerts.rules.yml: no alert")
	}
	for _, m := range alerts {
		if !quiet[m[1]] || !fires[m[1]] {
			t.Errorf("alert %s: alerts_test.yml has a case where it must not fire: %v, where it fires: %v", m[1], quiet[m[1]], fires[m[1]])
		}
	}
}

// testFor is the `for` of every alert in the end-to-end test: the
// production windows (minutes) would not end within a test's time. The
// promtool unit tests check the production windows.
const testFor = "5s"

var forLine = regexp.MustCompile(`(?m)^(\s+for:\s*)\S+\s*$`)

// prometheus is a prometheus server, a child process, with this
// folder's rules (each alert's `for` set to testFor), scraping targets
// every second as job.
type prometheus struct {
	url    string
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
}

// startPrometheus starts prometheus on listen, scraping targets (host:port,
// Caddy's admin listeners) at /metrics as job, and waits until it is ready.
func startPrometheus(t *testing.T, ctx context.Context, bin, listen, job string, targets []string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	recording, err := os.ReadFile("prometheus/recording.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile("prometheus/alerts.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(forLine.FindAll(alerts, -1)); n == 0 {
		t.Fatal("alerts.rules.yml: no `for:` line to shorten")
	}
	alerts = forLine.ReplaceAll(alerts, []byte("${1}"+testFor))
	quoted, _ := json.Marshal(targets) // a YAML flow sequence
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - recording.rules.yml
  - alerts.rules.yml
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: %s
`, job, quoted)
	for name, b := range map[string][]byte{
		"recording.rules.yml": recording, "alerts.rules.yml": alerts, "prometheus.yml": []byte(cfg),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &prometheus{url: "http://" + listen, exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
		"--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited: %v\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling its readiness, bounded by the deadline
	}
}

// sample is one series of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// api GETs path of Prometheus's HTTP API and decodes the answer's data
// into data, a pointer, once its status says success.
func (p *prometheus) api(path string, data any) error {
	resp, err := http.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	r := struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   any    `json:"data"`
	}{Data: data}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return err
	}
	if r.Status != "success" {
		return errors.New(r.Error)
	}
	return nil
}

// query evaluates expr now.
func (p *prometheus) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: a %s, want a vector", expr, data.ResultType)
	}
	var out []sample
	for _, s := range data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", expr, s.Value[1], err)
		}
		out = append(out, sample{s.Metric, v})
	}
	return out, nil
}

// alert is one alert of /api/v1/alerts.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"` // pending or firing
	ActiveAt time.Time         `json:"activeAt"`
}

// labelValues returns the values of label among the series of metric.
func (p *prometheus) labelValues(label, metric string) ([]string, error) {
	var values []string
	if err := p.api("/api/v1/label/"+label+"/values?match[]="+url.QueryEscape(metric), &values); err != nil {
		return nil, fmt.Errorf("label %s of %s: %w", label, metric, err)
	}
	return values, nil
}

// alerts returns the alerts pending or firing now.
func (p *prometheus) alerts() ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &data); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return data.Alerts, nil
}

// detectWithin bounds how much longer than its `for` window an alert
// may take to fire after its incident. The edges see an incident at once
// (a closed connection to Redis, a body the budget refuses) or within
// one engine scrape (engine_metrics: interval 1 s, timeout 1 s);
// Prometheus scrapes them every second and evaluates the recording
// rules, then the alerts, every second. That is about 4 s; the rest is
// the margin for a machine the test shares.
const detectWithin = 10 * time.Second

// incidentFires waits until the alert name fires with the given labels
// (a subset of its own) after an incident at `at`. It must have become
// pending at the incident or after (an alert pending already was not
// the incident's), and fire within its `for` window (testFor) and
// detectWithin of it. It returns when, after the incident, the alert
// became pending and when the test saw it firing.
func (p *prometheus) incidentFires(t *testing.T, name string, labels map[string]string, at time.Time) (pending, fired time.Duration) {
	t.Helper()
	deadline := at.Add(mustDuration(t, testFor) + detectWithin)
	var last []alert
	for {
		as, err := p.alerts()
		if err != nil {
			t.Fatal(err)
		}
		last = as
		for _, a := range as {
			if a.Labels["alertname"] != name || a.State != "firing" || !hasLabels(a.Labels, labels) {
				continue
			}
			fired = time.Since(at)
			// Prometheus stamps an evaluation with its scheduled time,
			// which may precede the sample it reads by a scrape.
			if a.ActiveAt.Before(at.Add(-time.Second)) {
				t.Errorf("%s%v was pending from %v, %v before its incident", name, labels, a.ActiveAt, at.Sub(a.ActiveAt))
			}
			return a.ActiveAt.Sub(at), fired
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v did not fire within %v (its for: %s, and %v to see the incident); alerts: %v",
				name, labels, time.Since(at).Round(time.Millisecond), testFor, detectWithin, last)
		}
		time.Sleep(200 * time.Millisecond) // polling Prometheus, bounded by the deadline
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
