package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/report"
)

// Chart geometry, in SVG user units, in the style of bench/report's SVG.
const (
	panelW  = 360 // plot area of one panel
	barH    = 16
	barGap  = 8
	marginR = 30
	headerH = 24 // the key above the first row
	titleH  = 30 // room for a row's title
	marginT = 24 // room for a panel's name
	marginB = 30 // room for x tick labels
)

// Bar colours: the lead policy stands out, its peers are grey.
const (
	leadColor    = "#1f77b4"
	peerColor    = "#bbb"
	whiskerColor = "#333"
)

// writeSVG draws sums as one self-contained SVG: a row per workload and
// load with two panels, token hit rate (0 to 1, the upper bound dashed) and
// TTFT p90 (0 to a nice maximum over the row), each a bar per policy at the
// mean with a whisker over the range of the repeats.
func writeSVG(w io.Writer, sums []*summary, lead string) error {
	longest := 0
	for _, s := range sums {
		for _, r := range s.rows {
			longest = max(longest, len(r.policy))
		}
	}
	labelW := max(60, 7*longest+12) // room for the policy names, at ~7 units a character
	width := 2 * (labelW + panelW + marginR)
	height := headerH
	for _, s := range sums {
		height += rowHeight(s)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="16" fill="#666">bars: mean over the repeats; whiskers: min to max; dashed: upper bound; %s in colour</text>`+"\n",
		labelW, html.EscapeString(lead))
	y0 := headerH
	for _, s := range sums {
		chartRow(&b, s, lead, labelW, y0)
		y0 += rowHeight(s)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func plotHeight(s *summary) int { return len(s.rows)*(barH+barGap) + barGap }

func rowHeight(s *summary) int { return titleH + marginT + plotHeight(s) + marginB }

// chartRow draws one summary's title and two panels with their top at y0.
func chartRow(b *strings.Builder, s *summary, lead string, labelW, y0 int) {
	b.WriteString(`<g class="group">` + "\n")
	fmt.Fprintf(b, `<text class="title" x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n",
		labelW, y0+20, html.EscapeString(s.title()))

	top := y0 + titleH + marginT
	// The TTFT axis ends at the slowest range top; bars past it are cut
	// there and labelled.
	var tops []float64
	for _, r := range s.rows {
		tops = append(tops, r.p90.hi)
	}
	hit := barPanel{x0: labelW, y0: top, h: plotHeight(s), max: 1}
	ttft := barPanel{x0: 2*labelW + panelW + marginR, y0: top, h: plotHeight(s), max: ttftAxisMax(tops)}

	fmt.Fprintf(b, `<g class="hit-rate">`+"\n")
	hit.frame(b, "token hit rate")
	for k, r := range s.rows {
		hit.bar(b, k, r.policy, r.hit, 3, r.policy == lead)
	}
	if s.bound != nil { // over the bars, which often reach it
		x := hit.px(s.bound.mean)
		fmt.Fprintf(b, `<line class="bound" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-dasharray="6,4"/>`+"\n", x, hit.y0, x, hit.y0+hit.h)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">upper bound %.3f</text>`+"\n", hit.x0+panelW, hit.y0-8, s.bound.mean)
	}
	b.WriteString("</g>\n")

	fmt.Fprintf(b, `<g class="ttft-p90">`+"\n")
	ttft.frame(b, "TTFT p90 (s)")
	for k, r := range s.rows {
		ttft.bar(b, k, r.policy, r.p90, 2, r.policy == lead)
		if r.p90.mean > ttft.max {
			y := ttft.y0 + barGap + k*(barH+barGap)
			fmt.Fprintf(b, `<text class="clipped" x="%d" y="%d" text-anchor="end" fill="white">%s s &#8250;</text>`+"\n",
				ttft.x0+panelW-4, y+barH/2+4, report.TrimFloat(math.Round(r.p90.mean*100)/100))
		}
	}
	b.WriteString("</g>\n</g>\n")
}

// barPanel maps values from 0 to max onto one plot area, a bar per row.
type barPanel struct {
	x0, y0 int // top left of the plot area
	h      int
	max    float64
}

func (p barPanel) px(v float64) float64 {
	return float64(p.x0) + min(max(v, 0), p.max)/p.max*panelW
}

// frame draws the plot area, its name and the x grid with tick labels.
func (p barPanel) frame(b *strings.Builder, name string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", p.x0, p.y0, panelW, p.h)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", p.x0, p.y0-8, html.EscapeString(name))
	step := report.NiceStep(p.max / 5)
	for k := 0; float64(k)*step <= p.max+step/1e6; k++ {
		v := float64(k) * step
		x := p.px(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, p.y0, x, p.y0+p.h)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, p.y0+p.h+16, report.TrimFloat(v))
	}
}

// bar draws row k: the policy's name, a bar to the mean (with the figures
// as its tooltip) and a whisker from lo to hi when they differ.
func (p barPanel) bar(b *strings.Builder, k int, policy string, s stat, digits int, lead bool) {
	color := peerColor
	if lead {
		color = leadColor
	}
	y := p.y0 + barGap + k*(barH+barGap)
	mid := float64(y) + barH/2
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x0-6, mid+4, html.EscapeString(policy))
	fmt.Fprintf(b, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
		p.x0, y, p.px(s.mean)-float64(p.x0), barH, color, html.EscapeString(policy), html.EscapeString(s.format(digits)))
	if s.lo == s.hi {
		return
	}
	lo, hi := p.px(s.lo), p.px(s.hi)
	fmt.Fprintf(b, `<g class="whisker" stroke="%s">`, whiskerColor)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, lo, mid, hi, mid)
	for _, x := range []float64{lo, hi} {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x, mid-barH/4, x, mid+barH/4)
	}
	b.WriteString("</g>\n")
}

// ttftAxisMax is where a TTFT axis ends for the values vs (sorted in
// place): a nice maximum over the largest, or over 4x the median when an
// outlier (a collapsed policy's minutes) would flatten every other mark.
func ttftAxisMax(vs []float64) float64 {
	if len(vs) == 0 {
		return niceMax(0)
	}
	slices.Sort(vs)
	return niceMax(min(vs[len(vs)-1], 4*vs[len(vs)/2]))
}

// niceMax rounds v up to a multiple of a nice step, 1 when v is not
// positive.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	step := report.NiceStep(v / 5)
	return math.Ceil(v/step-1e-9) * step
}
