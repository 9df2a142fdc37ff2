package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// Chart geometry, in SVG user units.
const (
	panelW, panelH = 420, 260 // plot area of one panel
	marginL        = 70       // room for y tick labels
	marginR        = 30
	marginT        = 50 // room for the title
	marginB        = 50 // room for x tick labels and the axis name
	legendH        = 30
)

// palette colors the policies, in order of first appearance.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#7f7f7f"}

// SVG writes a chart per result, stacked: TTFT p90 (log scale) and token
// hit rate (with the upper bound dashed) against the offered load, a line
// per policy.
func SVG(w io.Writer, results []*driver.Result) error {
	rowH := marginT + panelH + marginB + legendH
	width := 2 * (marginL + panelW + marginR)
	height := max(1, len(results)) * rowH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, r := range results {
		y0 := i * rowH
		chart(&b, r, y0)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// series is one policy's points.
type series struct {
	name   string
	color  string
	x      []float64
	ttft   []float64
	hit    []float64
	closed bool
}

// chart draws one result's two panels with their top at y0.
func chart(b *strings.Builder, r *driver.Result, y0 int) {
	var ss []*series
	for _, run := range r.Runs {
		i := slices.IndexFunc(ss, func(s *series) bool { return s.name == run.Policy })
		if i < 0 {
			ss = append(ss, &series{name: run.Policy, color: palette[len(ss)%len(palette)], closed: run.QPS == 0})
			i = len(ss) - 1
		}
		s := ss[i]
		x := run.QPS
		if run.QPS == 0 {
			x = float64(run.Users)
		}
		s.x = append(s.x, x)
		s.ttft = append(s.ttft, run.TTFT.P90)
		s.hit = append(s.hit, run.HitRate)
	}
	xlabel := "offered load (requests/s)"
	if len(ss) > 0 && ss[0].closed {
		xlabel = "concurrent users"
	}

	// Shared x range.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	tmin, tmax := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for k := range s.x {
			xmin, xmax = min(xmin, s.x[k]), max(xmax, s.x[k])
			if s.ttft[k] > 0 {
				tmin, tmax = min(tmin, s.ttft[k]), max(tmax, s.ttft[k])
			}
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if math.IsInf(tmin, 0) {
		tmin, tmax = 0.01, 1
	}
	lo, hi := math.Floor(math.Log10(tmin)), math.Ceil(math.Log10(tmax))
	if hi == lo {
		hi++
	}

	left := panel{x0: marginL, y0: y0 + marginT, xmin: xmin, xmax: xmax}
	right := panel{x0: 2*marginL + panelW + marginR, y0: y0 + marginT, xmin: xmin, xmax: xmax}

	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, y0+20, html.EscapeString(r.Workload))

	// Left: TTFT p90, log scale.
	left.frame(b, "TTFT p90 (s, log scale)", xlabel)
	left.xticks(b)
	for e := lo; e <= hi; e++ {
		v := math.Pow(10, e)
		left.ytick(b, (e-lo)/(hi-lo), TrimFloat(v))
	}
	ylog := func(v float64) float64 {
		if v <= 0 {
			return -1 // no data
		}
		return (math.Log10(v) - lo) / (hi - lo)
	}
	for _, s := range ss {
		left.line(b, s.color, s.x, s.ttft, ylog)
	}

	// Right: token hit rate, 0 to 1, with the upper bound.
	right.frame(b, "token hit rate", xlabel)
	right.xticks(b)
	for k := 0; k <= 5; k++ {
		right.ytick(b, float64(k)/5, TrimFloat(float64(k)/5))
	}
	ylin := func(v float64) float64 { return v }
	if r.Bound != nil {
		y := right.py(r.Bound.HitRate)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="6,4"/>`+"\n", right.x0, y, right.x0+panelW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">upper bound %.2f</text>`+"\n", right.x0+panelW-4, y-4, r.Bound.HitRate)
	}
	for _, s := range ss {
		right.line(b, s.color, s.x, s.hit, ylin)
	}

	// Legend.
	ly := y0 + marginT + panelH + marginB + 10
	x := marginL
	for _, s := range ss {
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, x, ly, x+20, ly, s.color)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+25, ly+4, html.EscapeString(s.name))
		x += 40 + 8*len(s.name)
	}
}

// panel maps data to one plot area.
type panel struct {
	x0, y0     int
	xmin, xmax float64
}

func (p panel) px(v float64) float64 {
	return float64(p.x0) + (v-p.xmin)/(p.xmax-p.xmin)*panelW
}

// py maps a fraction of the y range (0 bottom, 1 top) to SVG y.
func (p panel) py(f float64) float64 {
	return float64(p.y0) + (1-f)*panelH
}

func (p panel) frame(b *strings.Builder, ylabel, xlabel string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", p.x0, p.y0, panelW, panelH)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", p.x0, p.y0-8, html.EscapeString(ylabel))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", p.x0+panelW/2, p.y0+panelH+38, html.EscapeString(xlabel))
}

func (p panel) xticks(b *strings.Builder) {
	step := NiceStep((p.xmax - p.xmin) / 6)
	for v := math.Ceil(p.xmin/step) * step; v <= p.xmax+step/1e6; v += step {
		x := p.px(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, p.y0, x, p.y0+panelH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, p.y0+panelH+16, TrimFloat(v))
	}
}

func (p panel) ytick(b *strings.Builder, f float64, label string) {
	y := p.py(f)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, p.x0, y, p.x0+panelW, y)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x0-6, y+4, label)
}

// line draws a polyline with a dot per point; fy maps a value to a
// fraction of the y range, negative for a point without data.
func (p panel) line(b *strings.Builder, color string, xs, ys []float64, fy func(float64) float64) {
	var pts []string
	for k := range xs {
		f := fy(ys[k])
		if f < 0 {
			continue
		}
		x, y := p.px(xs[k]), p.py(min(1, f))
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x, y, color)
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), color)
	}
	b.WriteByte('\n')
}

// NiceStep rounds a raw tick step to 1, 2 or 5 times a power of ten.
func NiceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

// TrimFloat formats v without trailing zeros.
func TrimFloat(v float64) string {
	return fmt.Sprintf("%g", math.Round(v*1e6)/1e6)
}
