package main

import (
	"encoding/xml"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// chartBar is one bar read back from the SVG.
type chartBar struct {
	policy string // from the bar's tooltip
	width  float64
	fill   string
}

// chartGroup is one row of panels read back from the SVG.
type chartGroup struct {
	title  string
	panels map[string][]chartBar // by the panel's class
	bounds int                   // dashed upper-bound lines
}

// parseChart decodes every token of svg, failing t on malformed XML, and
// collects the rows' titles, bars and upper-bound lines.
func parseChart(t *testing.T, svg string) []*chartGroup {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var groups []*chartGroup
	var stack []xml.StartElement
	last := func(what string) *chartGroup {
		if len(groups) == 0 {
			t.Fatalf("%s outside a group:\n%s", what, svg)
		}
		return groups[len(groups)-1]
	}
	panel := func() string {
		for i := len(stack) - 1; i >= 0; i-- {
			if c := class(stack[i]); stack[i].Name.Local == "g" && (c == "hit-rate" || c == "ttft-p90") {
				return c
			}
		}
		t.Fatalf("bar outside a panel:\n%s", svg)
		return ""
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("decoding the SVG: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tok.Copy())
			switch c := class(tok); {
			case tok.Name.Local == "g" && c == "group":
				groups = append(groups, &chartGroup{panels: map[string][]chartBar{}})
			case tok.Name.Local == "line" && c == "bound":
				last("bound").bounds++
			case tok.Name.Local == "rect" && c == "bar":
				w, err := strconv.ParseFloat(attr(tok, "width"), 64)
				if err != nil {
					t.Fatalf("bar width: %v", err)
				}
				g, p := last("bar"), panel()
				g.panels[p] = append(g.panels[p], chartBar{width: w, fill: attr(tok, "fill")})
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 {
				continue
			}
			top := stack[len(stack)-1]
			switch {
			case top.Name.Local == "text" && class(top) == "title":
				last("title").title += string(tok)
			case top.Name.Local == "title" && len(stack) > 1 && class(stack[len(stack)-2]) == "bar":
				bars := last("bar").panels[panel()]
				policy, _, _ := strings.Cut(string(tok), ":")
				bars[len(bars)-1].policy += policy
			}
		}
	}
	return groups
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func class(e xml.StartElement) string { return attr(e, "class") }

func TestSVG(t *testing.T) {
	results := []*driver.Result{
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.86}, Runs: []*driver.Run{
			run("prefix_cache", 0.80, 0.5), run("peer_a", 0.70, 0.4), run("peer_b", 0.78, 0.9)}},
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.88}, Runs: []*driver.Run{
			run("prefix_cache", 0.76, 0.7), run("peer_a", 0.72, 0.6), run("peer_b", 0.82, 1.1)}},
		// One run each: hit rates 1 and 0.5 on the 0..1 axis, TTFT p90 2 and
		// 1 on one axis, so the second bar is half the first in both panels.
		{Workload: "chat <&>", Runs: []*driver.Run{
			run("pc_256k", 1.0, 2.0), run("peer_a", 0.5, 1.0), run("peer_b", 0.25, 0.5)}},
	}
	// As main does: rename, then keep only -policies, in that order.
	if err := renamePolicies(results, "pc_256k=prefix_cache"); err != nil {
		t.Fatal(err)
	}
	sums := summaries(group(results, []string{"prefix_cache", "peer_a"}))
	var b strings.Builder
	if err := writeSVG(&b, sums, "prefix_cache"); err != nil {
		t.Fatal(err)
	}
	groups := parseChart(t, b.String())

	var titles []string
	for _, g := range groups {
		titles = append(titles, g.title)
	}
	wantTitles := []string{
		"agent, 20 QPS (2 repeats; upper bound 0.870 [0.860–0.880])",
		"chat <&>, 20 QPS (1 run)",
	}
	if !slices.Equal(titles, wantTitles) {
		t.Fatalf("titles = %q, want %q", titles, wantTitles)
	}
	if groups[0].bounds != 1 || groups[1].bounds != 0 {
		t.Errorf("upper-bound lines = %d, %d, want 1, 0", groups[0].bounds, groups[1].bounds)
	}

	wantPolicies := []string{"prefix_cache", "peer_a"}
	for i, g := range groups {
		for _, p := range []string{"hit-rate", "ttft-p90"} {
			bars := g.panels[p]
			var policies []string
			for _, bar := range bars {
				policies = append(policies, bar.policy)
			}
			if !slices.Equal(policies, wantPolicies) {
				t.Errorf("group %d %s bars = %q, want %q", i, p, policies, wantPolicies)
				continue
			}
			if bars[0].fill != leadColor || bars[1].fill != peerColor {
				t.Errorf("group %d %s fills = %s, %s, want %s, %s", i, p, bars[0].fill, bars[1].fill, leadColor, peerColor)
			}
		}
	}

	chat := groups[1]
	for _, p := range []string{"hit-rate", "ttft-p90"} {
		bars := chat.panels[p]
		if len(bars) != 2 {
			continue // reported above
		}
		if bars[0].width <= 0 || math.Abs(bars[1].width/bars[0].width-0.5) > 0.01 {
			t.Errorf("%s bar widths = %v, %v, want the second half the first", p, bars[0].width, bars[1].width)
		}
	}
	if bars := chat.panels["hit-rate"]; len(bars) > 0 && math.Abs(bars[0].width-panelW) > 0.1 {
		t.Errorf("hit rate 1 bar width = %v, want the full axis %d", bars[0].width, panelW)
	}
}

func TestNiceMax(t *testing.T) {
	tests := []struct{ v, want float64 }{
		{0, 1},
		{0.9, 1},
		{1, 1},
		{1.1, 1.5},
		{0.6, 0.6},
		{37, 40},
	}
	for _, tt := range tests {
		if got := niceMax(tt.v); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("niceMax(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
