package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func results() []*driver.Result {
	run := func(policy string, qps, hit, p90 float64) *driver.Run {
		return &driver.Run{Policy: policy, QPS: qps, Requests: 100, HitRate: hit, ShareOfBound: hit / 0.8,
			TTFT: driver.Percentiles{P50: p90 / 2, P90: p90, P99: 2 * p90}, OutputTPS: 1000, Samples: 10}
	}
	return []*driver.Result{
		{Workload: "shared-prefix", Description: "d", Engines: 8, Bound: &driver.Bound{HitRate: 0.8, PromptTokens: 1}, Runs: []*driver.Run{
			run("round_robin", 10, 0.2, 0.1), run("prefix_cache", 10, 0.78, 0.05),
			run("round_robin", 20, 0.2, 3.5), run("prefix_cache", 20, 0.77, 0.06),
		}},
		{Workload: "chat <&>", Runs: []*driver.Run{{Policy: "header", Users: 4, Requests: 5}}},
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, results()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### shared-prefix",
		"token hit rate 0.800",
		"| policy | QPS |",
		"| prefix_cache | 20 | 100 | 0.770 | 96% | 30 ms | 60 ms | 120 ms | 1000 | 0 |",
		"| round_robin | 20 | 100 | 0.200 | 25% | 1.75 s | 3.50 s | 7.00 s |",
		"| policy | users |",
		"| header | 4 | 5 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown() lacks %q:\n%s", want, out)
		}
	}
}

func TestJSON(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, results()); err != nil {
		t.Fatal(err)
	}
	var back []*driver.Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || len(back[0].Runs) != 4 || back[0].Runs[3].HitRate != 0.77 {
		t.Errorf("JSON round trip = %+v", back)
	}
}

func TestSVG(t *testing.T) {
	var b bytes.Buffer
	if err := SVG(&b, results()); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, with a polyline per policy and panel where a
	// policy has two points or more.
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	polylines, circles := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG() is not well-formed XML: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				polylines++
			case "circle":
				circles++
			}
		}
	}
	if polylines != 4 {
		t.Errorf("SVG() has %d polylines, want 4 (2 policies x 2 panels)", polylines)
	}
	// 4 runs of the first result in 2 panels; the second result's run
	// has a TTFT of 0 (no data, no point) and a hit rate of 0 (a point).
	if want := 4*2 + 1; circles != want {
		t.Errorf("SVG() has %d points, want %d", circles, want)
	}
}

func TestNiceStep(t *testing.T) {
	tests := []struct{ raw, want float64 }{{0.7, 1}, {1.5, 2}, {3, 5}, {7, 10}, {12, 20}, {0, 1}}
	for _, tt := range tests {
		if got := NiceStep(tt.raw); got != tt.want {
			t.Errorf("NiceStep(%v) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}
