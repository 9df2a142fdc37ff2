package caddymodule

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// operationsMetricRow is a row of docs/operations.md's "Every metric"
// table: | `name` | type | labels | what | read by |.
var operationsMetricRow = regexp.MustCompile("(?m)^\\| `(caddy_prefix_cache_[a-z0-9_]+)` \\| ([a-z]+) \\|.*\\| ([^|]*) \\|\\s*$")

var (
	// ruleBlock is one rule of a rules file, from its `- record:` or
	// `- alert:` line to the next.
	ruleBlock = regexp.MustCompile(`(?m)^\s+- (?:record|alert): (\S+)\s*$`)
	// readByRule is a recording rule the "read by" column names, or a
	// family of them (job:prefix_cache_fallback:*).
	readByRule = regexp.MustCompile("`([a-z_]+:prefix_cache_[a-z0-9_]+:(?:[a-z0-9_]+|\\*))`")
	// readByPanel is a dashboard panel the "read by" column names.
	readByPanel = regexp.MustCompile(`panel "([^"]+)"`)
)

// rulesExprs returns each rule of deploy/prometheus's rules files, by
// name, with the text of its definition (its expr among it).
func rulesExprs(t *testing.T) map[string]string {
	t.Helper()
	rules := map[string]string{}
	for _, f := range []string{"../deploy/prometheus/recording.rules.yml", "../deploy/prometheus/alerts.rules.yml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		idx := ruleBlock.FindAllStringSubmatchIndex(s, -1)
		for i, m := range idx {
			end := len(s)
			if i+1 < len(idx) {
				end = idx[i+1][0]
			}
			rules[s[m[2]:m[3]]] = s[m[1]:end]
		}
	}
	if len(rules) == 0 {
		t.Fatal("deploy/prometheus: no rule")
	}
	return rules
}

// dashboardPanels returns the queries of each panel of the Grafana
// dashboard by title, the panels of rows (collapsed or not) included.
func dashboardPanels(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/prefix-cache.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// readsMetric reports whether a PromQL text reads the family name: the
// name itself, a histogram's series, or a recording rule that reads it.
func readsMetric(expr, name string, rules map[string]string, seen map[string]bool) bool {
	if regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `(_bucket|_sum|_count)?\b`).MatchString(expr) {
		return true
	}
	for rule, def := range rules {
		if seen[rule] || !strings.Contains(expr, rule) {
			continue
		}
		seen[rule] = true
		if readsMetric(def, name, rules, seen) {
			return true
		}
	}
	return false
}

// TestEveryMetricReadAndDocumented checks, for every metric family the
// module registers, that docs/operations.md's "Every metric" table has
// a row with its full name and its type, and that each recording rule
// and dashboard panel the row's "read by" column names does read it
// (itself, or through the recording rules it reads). A row whose "read
// by" starts with "none" must say why; no row says so today. A metric
// added to metrics.go without a row, or a rule or panel that stops
// reading it, fails here, without Prometheus or Caddy running.
func TestEveryMetricReadAndDocumented(t *testing.T) {
	families := registeredMetrics(t)
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, m := range operationsMetricRow.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = m[2:]
	}
	rules := rulesExprs(t)
	panels := dashboardPanels(t)
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	for name, typ := range families {
		row, ok := rows[name]
		if !ok {
			t.Errorf("docs/operations.md: no row for %s in the Every metric table", name)
			continue
		}
		if want, known := types[typ]; known && row[0] != want {
			t.Errorf("docs/operations.md: %s is a %s, the table says %s", name, want, row[0])
		}
		readBy := strings.TrimSpace(row[1])
		if why, ok := strings.CutPrefix(readBy, "none"); ok {
			if len(strings.Fields(why)) < 3 {
				t.Errorf("docs/operations.md: %s is read by none, and the row does not say why: %q", name, readBy)
			}
			continue
		}
		named := 0
		for _, m := range readByRule.FindAllStringSubmatch(readBy, -1) {
			prefix, wild := strings.CutSuffix(m[1], "*")
			matched := false
			for rule, def := range rules {
				if rule != m[1] && !(wild && strings.HasPrefix(rule, prefix)) {
					continue
				}
				matched = true
				if !readsMetric(def, name, rules, map[string]bool{rule: true}) {
					t.Errorf("docs/operations.md: %s is read by %s, says the table, but rule %s does not read it", name, m[1], rule)
				}
			}
			if !matched {
				t.Errorf("docs/operations.md: %s is read by %s, says the table, which deploy/prometheus does not define", name, m[1])
			}
			named++
		}
		for _, m := range readByPanel.FindAllStringSubmatch(readBy, -1) {
			exprs, ok := panels[m[1]]
			if !ok {
				t.Errorf("docs/operations.md: %s is read by panel %q, says the table, which the dashboard does not have", name, m[1])
			} else if !readsMetric(strings.Join(exprs, "\n"), name, rules, map[string]bool{}) {
				t.Errorf("docs/operations.md: %s is read by panel %q, says the table, whose queries do not read it", name, m[1])
			}
			named++
		}
		if named == 0 {
			t.Errorf("docs/operations.md: the row of %s names no recording rule or panel that reads it (%q), nor says none and why", name, readBy)
		}
	}
	for name := range rows {
		if _, ok := families[name]; !ok {
			t.Errorf("docs/operations.md: the Every metric table lists %s, which the module does not register", name)
		}
	}
	t.Logf("%d metric families, %d rows, %d rules, %d panels with queries", len(families), len(rows), len(rules), len(panels))
}
