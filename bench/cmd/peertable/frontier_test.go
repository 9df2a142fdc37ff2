package main

import (
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// frontierRuns returns five runs of one cell: the lead r at its default
// (knob k = 2) and at k = 1 and 8, a variant of another knob, and three
// peers. peer_a is ahead of r in every run by the same margins (it
// beats it); peer_b is ahead of r-k-1 in the means only, its hit rate
// alternating around r-k-1's; peer_c is behind everything.
func frontierRuns() []*driver.Result {
	var rs []*driver.Result
	for k := range 5 {
		noise := 0.02 * float64(1-2*(k%2)) // +, −, +, −, +
		rs = append(rs, &driver.Result{Workload: "chat", Runs: []*driver.Run{
			run("r", 0.80, 1.0), run("r-k-1", 0.78, 0.8), run("r-k-8", 0.82, 1.4), run("r-other-3", 0.90, 0.1),
			run("peer_a", 0.81, 0.9), run("peer_b", 0.79+noise, 0.7), run("peer_c", 0.70, 2.0),
		}})
	}
	return rs
}

func TestFrontier(t *testing.T) {
	fs, err := frontiers(summaries(group(frontierRuns(), nil)), "r", "k", 2, MinPairs)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 {
		t.Fatalf("%d frontiers, want 1", len(fs))
	}
	var got []string
	optimal := map[string]bool{}
	for _, p := range fs[0].points {
		got = append(got, p.policy)
		optimal[p.policy] = p.optimal
	}
	// The lead's points by value, r-other-3 left out, then the peers.
	if want := "r-k-1 r r-k-8 peer_a peer_b peer_c"; strings.Join(got, " ") != want {
		t.Errorf("points %v, want %s", got, want)
	}
	// r is behind peer_a and r-k-1 behind peer_b on both; r-k-8 has
	// the most hits, peer_b the shortest tail; peer_c trails r.
	for p, want := range map[string]bool{"r": false, "r-k-1": false, "r-k-8": true, "peer_a": true, "peer_b": true, "peer_c": false} {
		if optimal[p] != want {
			t.Errorf("%s on the frontier: %v, want %v", p, optimal[p], want)
		}
	}
	var b strings.Builder
	writeFrontiers(&b, fs, "r", "k", MinPairs)
	out := b.String()
	for _, line := range []string{
		"| r-k-1 | 1 | 0.780 | 0.800 |  |",
		"| r-k-8 | 8 | 0.820 | 1.400 | frontier |",
		"| peer_a |  | 0.810 | 0.900 | frontier |",
		"| peer_a | r | +0.010 [+0.010, +0.010] 5+/0− | -0.1000 [-0.1000, -0.1000] 0+/5− | **beats** |",
		"| peer_b | r-k-1 |",
		"| chat, 20 QPS | 1, 2, 8 | peer_a > r | peer_b > r-k-1 |",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	if !strings.Contains(out, "| ahead in the means only |") {
		t.Errorf("peer_b, whose hit rate is ahead of r-k-1's in 3 runs of 5, beats it:\n%s", out)
	}
	if strings.Contains(out, "r-other-3") || strings.Contains(out, "| peer_c | r") {
		t.Errorf("another knob's variant shown, or peer_c ahead of a lead setting:\n%s", out)
	}
}

func TestFrontierUnpairedAndEmpty(t *testing.T) {
	rs := frontierRuns()
	rs[0].Runs = rs[0].Runs[:4] // one run fewer of every peer
	fs, err := frontiers(summaries(group(rs, nil)), "r", "k", 2, MinPairs)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeFrontiers(&b, fs, "r", "k", MinPairs)
	if !strings.Contains(b.String(), "| peer_a | r | – | – | unpaired |") {
		t.Errorf("peer_a with 4 runs against r's 5 is judged:\n%s", b.String())
	}
	if _, err := frontiers(summaries(group(rs, nil)), "s", "k", 2, MinPairs); err == nil {
		t.Errorf("a frontier of a policy without runs: no error")
	}
	bad := frontierRuns()
	bad[0].Runs = append(bad[0].Runs, run("r-k-fast", 0.9, 1))
	if _, err := frontiers(summaries(group(bad, nil)), "r", "k", 2, MinPairs); err == nil {
		t.Errorf("a variant named r-k-fast: no error")
	}
}

// TestFrontierSVG reads the chart back: a circle per point, the lead's
// in colour, higher hit rates drawn higher and longer tails further
// right, the frontier's points marked.
func TestFrontierSVG(t *testing.T) {
	fs, err := frontiers(summaries(group(frontierRuns(), nil)), "r", "k", 2, MinPairs)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeFrontierSVG(&b, fs, "r", "k"); err != nil {
		t.Fatal(err)
	}
	type circle struct {
		class, policy string
		cx, cy        float64
		fill          string
	}
	var circles []circle
	d := xml.NewDecoder(strings.NewReader(b.String()))
	var open *circle
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("decoding the SVG: %v\n%s", err, b.String())
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "circle" {
				open = &circle{class: class(tok), cx: num(t, attr(tok, "cx")), cy: num(t, attr(tok, "cy")), fill: attr(tok, "fill")}
			}
		case xml.CharData:
			if open != nil && open.policy == "" {
				open.policy, _, _ = strings.Cut(string(tok), ":")
			}
		case xml.EndElement:
			if tok.Name.Local == "circle" {
				circles = append(circles, *open)
				open = nil
			}
		}
	}
	by := map[string]circle{}
	for _, c := range circles {
		by[c.policy] = c
	}
	if len(circles) != 6 || len(by) != 6 {
		t.Fatalf("%d circles (%d policies), want 6:\n%s", len(circles), len(by), b.String())
	}
	for p, want := range map[string]string{"r": "lead", "r-k-8": "lead optimal", "peer_a": "peer optimal", "peer_c": "peer"} {
		if by[p].class != want {
			t.Errorf("%s: class %q, want %q", p, by[p].class, want)
		}
	}
	if by["r"].fill != leadColor || by["peer_a"].fill != peerColor {
		t.Errorf("fills: r %s, peer_a %s; want %s and %s", by["r"].fill, by["peer_a"].fill, leadColor, peerColor)
	}
	// Hit rates r-k-8 > peer_a > r > peer_c, TTFT p90 peer_b < r-k-1 < r < r-k-8.
	if !(by["r-k-8"].cy < by["peer_a"].cy && by["peer_a"].cy < by["r"].cy && by["r"].cy < by["peer_c"].cy) {
		t.Errorf("heights do not follow hit rates: %+v", by)
	}
	if !(by["peer_b"].cx < by["r-k-1"].cx && by["r-k-1"].cx < by["r"].cx && by["r"].cx < by["r-k-8"].cx) {
		t.Errorf("x positions do not follow TTFT p90: %+v", by)
	}
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("attribute %q: %v", s, err)
	}
	return v
}
