package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"strconv"
	"strings"
)

// chart is a bar chart of succeeded and failed attempts per minute, drawn
// by the server as inline SVG: one column per minute, failed stacked on
// succeeded.
type chart struct {
	W, H int
	Max  int // the tallest column, the scale's top
	Bars []bar
}

// bar is one minute's column: the succeeded part (S) under the failed part
// (F), in SVG coordinates.
type bar struct {
	X, W   float64
	SY, SH float64
	FY, FH float64
	Title  string
}

// newChart lays out series in a w×h box.
func newChart(series []Minute, w, h int) chart {
	c := chart{W: w, H: h}
	for _, m := range series {
		c.Max = max(c.Max, m.Succeeded+m.Failed())
	}
	if len(series) == 0 {
		return c
	}
	step := float64(w) / float64(len(series))
	gap := 0.0
	if step >= 4 {
		gap = 1
	}
	scale := 0.0
	if c.Max > 0 {
		scale = float64(h) / float64(c.Max)
	}
	for i, m := range series {
		sh := float64(m.Succeeded) * scale
		fh := float64(m.Failed()) * scale
		c.Bars = append(c.Bars, bar{
			X: float64(i) * step, W: step - gap,
			SY: float64(h) - sh, SH: sh,
			FY: float64(h) - sh - fh, FH: fh,
			Title: fmt.Sprintf("%s: %d succeeded, %d failed (%d retryable, %d permanent, %d unsafe)",
				m.Start.Format("15:04Z"), m.Succeeded, m.Failed(), m.Retryable, m.Permanent, m.Unsafe),
		})
	}
	return c
}

// hourChart is a page's chart of the last hour and its totals.
type hourChart struct {
	Chart         *chart
	HourSucceeded int
	HourFailed    int
}

// newHourChart lays out series in a w×h box and sums it.
func newHourChart(series []Minute, w, h int) hourChart {
	c := newChart(series, w, h)
	hc := hourChart{Chart: &c}
	for _, m := range series {
		hc.HourSucceeded += m.Succeeded
		hc.HourFailed += m.Failed()
	}
	return hc
}

// SVG draws the chart as inline SVG. It is written directly rather than by
// a template: the targets page draws one per target, and executing a
// template per bar cost tens of milliseconds per page. Every value is a
// number or escaped text.
func (c *chart) SVG() template.HTML {
	var b strings.Builder
	b.Grow(200 + 160*len(c.Bars))
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" preserveAspectRatio="none" role="img" aria-label="attempts per minute, last hour: succeeded and failed">`, c.W, c.H, c.W, c.H)
	fmt.Fprintf(&b, `<rect class="chart-bg" x="0" y="0" width="%d" height="%d"></rect>`, c.W, c.H)
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	for _, r := range c.Bars {
		if r.SH == 0 && r.FH == 0 {
			continue
		}
		b.WriteString(`<g><title>`)
		b.WriteString(html.EscapeString(r.Title))
		b.WriteString(`</title>`)
		if r.SH > 0 {
			b.WriteString(`<rect class="ok" x="` + num(r.X) + `" y="` + num(r.SY) + `" width="` + num(r.W) + `" height="` + num(r.SH) + `"></rect>`)
		}
		if r.FH > 0 {
			b.WriteString(`<rect class="bad" x="` + num(r.X) + `" y="` + num(r.FY) + `" width="` + num(r.W) + `" height="` + num(r.FH) + `"></rect>`)
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
