package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// progress draws a one-line progress bar on a terminal (stderr), redrawn
// in place with a carriage return. A nil *progress draws nothing, so
// commands call it unconditionally.
type progress struct {
	w         io.Writer
	total     float64
	done      float64
	label     string
	lastPct   int
	lastLabel string
	width     int // length of the last line drawn, to blank it out
}

// newProgress returns a bar over total units writing to w, or nil when the
// bar is off: it is on when force is set (--progress) or w is a terminal.
func newProgress(w io.Writer, force bool, total float64) *progress {
	if !force && !isTerminal(w) {
		return nil
	}
	return &progress{w: w, total: total, lastPct: -1}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// add advances the bar by n units and shows label; it redraws only when
// the percentage or the label changed.
func (p *progress) add(n float64, label string) {
	if p == nil {
		return
	}
	p.done = min(p.done+n, p.total)
	p.label = label
	pct := 100
	if p.total > 0 {
		pct = int(100 * p.done / p.total)
	}
	if pct == p.lastPct && label == p.lastLabel {
		return
	}
	p.lastPct, p.lastLabel = pct, label
	const barLen = 30
	fill := pct * barLen / 100
	line := fmt.Sprintf("[%s%s] %3d%% %s", strings.Repeat("#", fill), strings.Repeat(".", barLen-fill), pct, label)
	pad := max(p.width-len(line), 0)
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// finish blanks the bar so that what follows starts on a clean line.
func (p *progress) finish() {
	if p == nil || p.width == 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	p.width = 0
}
