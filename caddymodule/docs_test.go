package caddymodule

import (
	"context"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// registeredMetrics returns the metric families the module registers into
// a config's registry, with their types where a registry's Gather says
// (the families of the state collector appear only with state, so their
// names come from its Describe).
func registeredMetrics(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]dto.MetricType{}
	for _, mf := range mfs {
		families[mf.GetName()] = mf.GetType()
	}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		(&metrics.state).Describe(ch)
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		if _, ok := families[m[1]]; !ok {
			families[m[1]] = dto.MetricType_UNTYPED
		}
	}
	return families
}

// citingFiles returns what operators read for metric names, read at test
// time whatever the docs' layout: the Markdown files of the top level,
// docs/ (any depth), examples/ and deploy/, and deploy/'s rules and
// dashboards (YAML, JSON).
func citingFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../examples/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	for _, dir := range []string{"../docs", "../deploy"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".md", ".yml", ".yaml", ".json":
				if !d.IsDir() {
					files = append(files, path)
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if !slices.Contains(files, "../README.md") {
		t.Fatalf("no README.md among %v", files)
	}
	return files
}

var (
	// citedMetric is a metric name of this module in prose, PromQL or a
	// dashboard: caddy_prefix_cache_ and the rest of the name, or a
	// family of them, caddy_prefix_cache_sync_*.
	citedMetric = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(caddy_prefix_cache_[a-zA-Z0-9_]*\*|caddy_prefix_cache_[a-zA-Z0-9_]+)`)
	// citedRule is a recording rule's name, level:prefix_cache_...:ops,
	// or a family of them, level:prefix_cache_...:*.
	citedRule = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])([a-z_]+:prefix_cache_[a-z0-9_]+:(?:[a-z0-9_]+|\*))`)
	ruleName  = regexp.MustCompile(`(?m)^\s+- record:\s*(\S+)\s*$`)
)

// TestDocsCiteRegisteredMetrics checks that every caddy_prefix_cache_*
// name in the docs, the Prometheus rules and the Grafana dashboard is a
// metric the module registers (a histogram's with its _bucket, _sum or
// _count), and that every recording rule the Markdown names is one that
// deploy/prometheus records: a metric renamed or dropped in metrics.go
// and still cited fails here.
func TestDocsCiteRegisteredMetrics(t *testing.T) {
	families := registeredMetrics(t)
	files := citingFiles(t)
	var records []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".yml") && !strings.HasSuffix(f, ".yaml") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ruleName.FindAllStringSubmatch(string(raw), -1) {
			records = append(records, m[1])
		}
	}
	if len(records) == 0 {
		t.Fatal("deploy/ records no rule")
	}

	metricsCited, rulesCited := 0, 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range citedMetric.FindAllStringSubmatch(line, -1) {
				metricsCited++
				name, wild := strings.CutSuffix(m[1], "*")
				if wild && !hasMetricPrefix(name, families) || !wild && !isRegisteredMetric(name, families) {
					t.Errorf("%s:%d cites metric %s, which the module does not register", f, i+1, m[1])
				}
			}
			if !strings.HasSuffix(f, ".md") {
				continue // the rules files define and test the rules
			}
			for _, m := range citedRule.FindAllStringSubmatch(line, -1) {
				rulesCited++
				name, wild := strings.CutSuffix(m[1], "*")
				if !slices.ContainsFunc(records, func(r string) bool {
					return r == name || wild && strings.HasPrefix(r, name)
				}) {
					t.Errorf("%s:%d cites recording rule %s, which deploy/prometheus does not record", f, i+1, m[1])
				}
			}
		}
	}
	if metricsCited == 0 {
		t.Fatal("no file cites a caddy_prefix_cache_ metric: the docs have moved, or this test lost them")
	}
	t.Logf("%d metric names and %d recording rules cited, %d families registered", metricsCited, rulesCited, len(families))
}

// isRegisteredMetric reports whether name is a registered family or a
// series of a registered histogram or summary.
func isRegisteredMetric(name string, families map[string]dto.MetricType) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch families[base] {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			return suffix != "_bucket"
		}
	}
	return false
}

var (
	citedPlaceholder = regexp.MustCompile(`\bhttp\.reverse_proxy\.prefix_cache\.([a-z0-9_]+)`)
	citedVar         = regexp.MustCompile(`\bhttp\.vars\.(prefix_cache\.[a-z0-9_]+)`)
)

// TestDocsCitePlaceholdersSet checks that every placeholder
// {http.reverse_proxy.prefix_cache.*} and var {http.vars.prefix_cache.*}
// the docs and the shipped Caddyfiles name is one a selection sets.
func TestDocsCitePlaceholdersSet(t *testing.T) {
	repl := caddy.NewReplacer()
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	setPlaceholders(r, decision{reason: "match", dialect: "openai_chat", chosen: "10.0.0.1:8000"})

	files := citingFiles(t)
	more, err := filepath.Glob("../examples/*.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	files = append(append(files, "../Caddyfile.example"), more...)
	cited := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range citedPlaceholder.FindAllStringSubmatch(line, -1) {
				cited++
				if _, ok := repl.Get(placeholderPrefix + m[1]); !ok {
					t.Errorf("%s:%d cites placeholder %s%s, which a selection does not set", f, i+1, placeholderPrefix, m[1])
				}
			}
			for _, m := range citedVar.FindAllStringSubmatch(line, -1) {
				cited++
				if m[1] != varKey {
					t.Errorf("%s:%d cites var http.vars.%s; the policy's var is http.vars.%s", f, i+1, m[1], varKey)
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("no file cites a placeholder of the policy")
	}
	t.Logf("%d placeholders and vars cited", cited)
}

// hasMetricPrefix says whether a registered family's name starts with
// prefix: a cited family of metrics, caddy_prefix_cache_sync_*.
func hasMetricPrefix(prefix string, families map[string]dto.MetricType) bool {
	for f := range families {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}
