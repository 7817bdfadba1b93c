package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvbuf/kvbuf/bench"
)

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// svgMaxRatio bounds the chart's axis (both ways).
const svgMaxRatio = 1000

// benchSVG draws the speedup of each own row (kvbuf, kvbuf-…) over each
// baseline of its workload (baseline median ÷ own median) as horizontal
// bars on a log scale centred on 1: bars to the right (green) mean kvbuf is
// faster, to the left (red) slower. Floor baselines are grey. One group of
// bars per own row.
func benchSVG(rows []bench.Row, cfg bench.Config, rounds int) string {
	type bar struct {
		label string
		ratio float64
		floor bool
		viol  int64
	}
	type group struct {
		name string
		bars []bar
	}
	floor := map[string]bool{}
	viol := map[string]int64{}
	for _, r := range rows {
		floor[r.Workload+"\x00"+r.Impl] = r.Floor
		viol[r.Workload+"\x00"+r.Impl] = r.Violations
	}
	var groups []group
	lo, hi := 0.5, 2.0
	nbars := 0
	for _, r := range rows {
		if !bench.IsOwn(r.Impl) || len(r.RatioVs) == 0 {
			continue
		}
		name := r.Workload
		if r.Impl != bench.ImplKvbuf {
			name += " (" + r.Impl + ")"
		}
		g := group{name: name}
		for _, o := range rows { // row order, not map order
			v, ok := r.RatioVs[o.Impl]
			if o.Workload != r.Workload || !ok || !(v > 0) || math.IsInf(v, 0) {
				continue
			}
			g.bars = append(g.bars, bar{o.Impl, v, floor[o.Workload+"\x00"+o.Impl], viol[o.Workload+"\x00"+o.Impl]})
			lo, hi = min(lo, v), max(hi, v)
		}
		nbars += len(g.bars)
		groups = append(groups, g)
	}
	// Whole decades around the data, at most svgMaxRatio: feature rows
	// (Count against a loop of Get) reach millions and would squash the
	// rest; their bars end at the edge with their true value.
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 1/svgMaxRatio))))
	hi = math.Pow(10, math.Ceil(math.Log10(min(hi, svgMaxRatio))))

	const (
		width  = 980
		left   = 300 // label column
		right  = 70  // room for value labels
		top    = 70
		rowH   = 20
		groupH = 24
		barH   = 13
	)
	plotW := float64(width - left - right)
	x := func(v float64) float64 {
		v = min(max(v, lo), hi)
		return left + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	height := top + len(groups)*groupH + nbars*rowH + 50

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">kvbuf speedup over each baseline (baseline time / kvbuf time, log scale)</text>`+"\n", 10)
	fmt.Fprintf(&b, `<text x="%d" y="44" fill="#555">%s. Right of 1: kvbuf faster. Grey: floor rows (read without pending changes).</text>`+"\n", 10, xmlEscaper.Replace(benchHeader(cfg, rounds)))

	plotBottom := height - 40
	// Decade grid lines, with 2x and 5x minor lines.
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > hi*1.0001 {
				break
			}
			stroke, sw := "#e0e0e0", 1.0
			if m == 1 {
				stroke = "#bdbdbd"
			}
			if math.Abs(v-1) < 1e-9 {
				stroke, sw = "#424242", 1.5
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%.1f"/>`+"\n", x(v), top-10, x(v), plotBottom, stroke, sw)
			if m == 1 || (m != 1 && hi/lo <= 100) {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%g</text>`+"\n", x(v), plotBottom+16, v)
			}
		}
	}
	y := top
	for _, g := range groups {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+16, xmlEscaper.Replace(g.name))
		y += groupH
		for _, br := range g.bars {
			fill := "#2e7d32"
			if br.ratio < 1 {
				fill = "#c62828"
			}
			label := br.label
			if br.floor {
				fill = "#9e9e9e"
				label += " (floor)"
			}
			if br.viol > 0 {
				label += fmt.Sprintf(" (>= %d violations)", br.viol)
			}
			x0, x1 := x(1), x(br.ratio)
			if x1 < x0 {
				x0, x1 = x1, x0
			}
			cy := y + (rowH-barH)/2
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">vs %s</text>`+"\n", left-8, cy+barH-2, xmlEscaper.Replace(label))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, cy, math.Max(x1-x0, 1), barH, fill)
			if br.ratio >= 1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", x1+4, cy+barH-2, fmtRatio(br.ratio)+"x")
			} else {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, cy+barH-2, fmtRatio(br.ratio)+"x")
			}
			y += rowH
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// fmtRatio prints a ratio with two or three significant digits.
func fmtRatio(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
