package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/report"
)

// Scatter geometry, in SVG user units: one panel per cell, two a row;
// the plot area is as wide as a bar panel's.
const (
	scatterH    = 240 // plot area
	scatterL    = 56  // room for the hit-rate ticks
	scatterR    = 24
	scatterT    = 50 // the cell's title and the axis name
	scatterB    = 40 // the TTFT ticks and name
	scatterCols = 2
)

// writeFrontierSVG draws each frontier as a scatter of hit rate against
// TTFT p90: the lead's knob in colour, its points joined in order of the
// knob's value and labelled with it; the peers' settings grey, named where
// they are on the frontier.
func writeFrontierSVG(w io.Writer, fs []frontier, base, knob string) error {
	cellW := scatterL + panelW + scatterR
	cellH := scatterT + scatterH + scatterB
	rows := (len(fs) + scatterCols - 1) / scatterCols
	width, height := scatterCols*cellW, headerH+rows*cellH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="16" fill="#666">means over the repeats; %s's %s in colour, joined in order of value; grey: peer settings, named on the frontier</text>`+"\n",
		scatterL, html.EscapeString(base), html.EscapeString(knob))
	for i, f := range fs {
		scatterPanel(&b, f, (i%scatterCols)*cellW, headerH+(i/scatterCols)*cellH)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// scatter maps (TTFT p90, hit rate) onto one plot area: TTFT along a
// bar panel's axis, hit rate up.
type scatter struct {
	barPanel               // TTFT p90, from 0
	ylo, yhi, ystp float64 // hit-rate axis
}

func (s scatter) py(hit float64) float64 {
	return float64(s.y0) + (s.yhi-min(max(hit, s.ylo), s.yhi))/(s.yhi-s.ylo)*float64(s.h)
}

// newScatter fits the axes to f's points: TTFT from 0 to
// ttftAxisMax's end (points beyond sit on the edge), hit rate over the
// points' range rounded out to nice steps.
func newScatter(f frontier, x0, y0 int) scatter {
	var p90s []float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range f.points {
		p90s = append(p90s, p.p90.mean)
		lo, hi = min(lo, p.hit.mean), max(hi, p.hit.mean)
	}
	s := scatter{barPanel: barPanel{x0: x0, y0: y0, h: scatterH, max: ttftAxisMax(p90s)}}
	if hi-lo < 0.01 {
		lo, hi = lo-0.005, hi+0.005
	}
	s.ystp = report.NiceStep((hi - lo) / 4)
	s.ylo = max(0, math.Floor(lo/s.ystp-1e-9)*s.ystp)
	s.yhi = min(1, math.Ceil(hi/s.ystp+1e-9)*s.ystp)
	if s.yhi <= s.ylo {
		s.ylo, s.yhi = 0, 1
	}
	return s
}

// scatterPanel draws one cell's frontier with the panel's top left at
// (px0, py0).
func scatterPanel(b *strings.Builder, f frontier, px0, py0 int) {
	s := newScatter(f, px0+scatterL, py0+scatterT)
	b.WriteString(`<g class="frontier">` + "\n")
	fmt.Fprintf(b, `<text class="title" x="%d" y="%d" font-size="15" font-weight="bold">%s, %s</text>`+"\n",
		s.x0, py0+20, html.EscapeString(f.s.workload), html.EscapeString(f.s.load))
	s.frame(b, "token hit rate") // the TTFT grid and ticks
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">TTFT p90 (s)</text>`+"\n", s.x0+panelW, s.y0+scatterH+34)
	for k := 0; s.ylo+float64(k)*s.ystp <= s.yhi+s.ystp/1e6; k++ {
		v := s.ylo + float64(k)*s.ystp
		y := s.py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, s.x0, y, s.x0+panelW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", s.x0-6, y+4, report.TrimFloat(math.Round(v*1000)/1000))
	}

	// The lead's sweep: a line in order of value under its points.
	var line []string
	for _, p := range f.points {
		if p.lead {
			line = append(line, fmt.Sprintf("%.1f,%.1f", s.px(p.p90.mean), s.py(p.hit.mean)))
		}
	}
	fmt.Fprintf(b, `<polyline class="sweep" points="%s" fill="none" stroke="%s"/>`+"\n", strings.Join(line, " "), leadColor)
	// Peers first, so that the lead's points are drawn over them.
	for _, lead := range []bool{false, true} {
		for _, p := range f.points {
			if p.lead != lead {
				continue
			}
			x, y := s.px(p.p90.mean), s.py(p.hit.mean)
			class, color, r, label, labelColor := "peer", peerColor, 3, "", "#666"
			if p.lead {
				class, color, r, label, labelColor = "lead", leadColor, 4, formatValue(p.value), leadColor
			} else if p.optimal {
				label = p.policy
			}
			if p.optimal {
				class += " optimal"
			}
			fmt.Fprintf(b, `<circle class="%s" cx="%.1f" cy="%.1f" r="%d" fill="%s"><title>%s: hit rate %s, TTFT p90 %s s</title></circle>`+"\n",
				class, x, y, r, color, html.EscapeString(p.policy), html.EscapeString(p.hit.format(3)), html.EscapeString(p.p90.format(3)))
			if label != "" {
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", x+6, y-6, labelColor, html.EscapeString(label))
			}
		}
	}
	b.WriteString("</g>\n")
}
