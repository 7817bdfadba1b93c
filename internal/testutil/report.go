package testutil

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// The report protocol: a child that its parent may kill at any moment (a
// crash child) tells the parent what it has done, one line per event, on
// its standard output:
//
//	R <start>          ready: the engine is open and the child starts at
//	                   op <start> (every op below it is done)
//	W <n>              promise: no op above n starts before the next W line
//	F <wm> <done>      a Flush returned nil; the watermark was <wm> after
//	                   it, and every write of every op <= <done> had
//	                   returned before Flush was called
//	M <name> <n>       a named gauge reached n (the parent keeps the maximum)
//
// Each line is written with one Write call on an unbuffered file (Reporter),
// and a write of fewer than PIPE_BUF (4096) bytes to a pipe is atomic, so a
// line the parent reads is never torn by a SIGKILL: what was written before
// the kill is all there, what was not is absent. The parser therefore
// rejects anything that is not a well-formed line.

// Reporter writes report lines. Its methods are safe for concurrent use.
// Write errors are kept (Err) rather than returned: a child whose parent
// went away has nobody to tell.
type Reporter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewReporter returns a Reporter writing to w, which should be unbuffered
// (os.Stdout is).
func NewReporter(w io.Writer) *Reporter { return &Reporter{w: w} }

func (r *Reporter) line(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = fmt.Appendf(r.buf[:0], format, args...)
	r.buf = append(r.buf, '\n')
	if _, err := r.w.Write(r.buf); err != nil && r.err == nil {
		r.err = err
	}
}

// Ready reports that the child is open and starts at op start.
func (r *Reporter) Ready(start uint64) { r.line("R %d", start) }

// Promise reports that no op above n starts before the next promise.
func (r *Reporter) Promise(n uint64) { r.line("W %d", n) }

// Flushed reports a Flush that returned nil: wm is the watermark after it,
// and every write of every op up to done had returned before it was called.
func (r *Reporter) Flushed(wm, done uint64) { r.line("F %d %d", wm, done) }

// Max reports that the gauge name reached n. name must be one word.
func (r *Reporter) Max(name string, n uint64) { r.line("M %s %d", name, n) }

// Err returns the first write error.
func (r *Reporter) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Report is what a child has reported.
type Report struct {
	// Ready is set by the R line; Start is its op.
	Ready bool
	Start uint64
	// MaxOp bounds the ops the child may have started: Start-1, raised by
	// every promise.
	MaxOp uint64
	// AckedWM is the highest watermark reported after a successful Flush;
	// AckedDone the highest op whose writes a successful Flush covered.
	AckedWM, AckedDone uint64
	// Flushes counts F lines.
	Flushes int
	// Max holds the highest value reported for each gauge.
	Max map[string]uint64
	// Lines counts the lines parsed.
	Lines int
}

// Parse adds one line (without its newline) to the report. A malformed
// line, a line before R, a second R, or a promise or flush that goes
// against an earlier line is an error.
func (rep *Report) Parse(line string) error {
	f := strings.Fields(line)
	bad := func(why string) error { return fmt.Errorf("testutil: report line %d %q: %s", rep.Lines+1, line, why) }
	nums := func(from int) ([]uint64, error) {
		var ns []uint64
		for _, s := range f[from:] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, bad("not a number: " + s)
			}
			ns = append(ns, n)
		}
		return ns, nil
	}
	if len(f) == 0 {
		return bad("empty")
	}
	if (f[0] == "R") == rep.Ready {
		if rep.Ready {
			return bad("second R line")
		}
		return bad("before the R line")
	}
	want := map[string]int{"R": 2, "W": 2, "F": 3, "M": 3}[f[0]]
	if want == 0 || len(f) != want {
		return bad("unknown kind or wrong number of fields")
	}
	switch f[0] {
	case "R":
		ns, err := nums(1)
		if err != nil {
			return err
		}
		if ns[0] == 0 {
			return bad("start 0 (ops are numbered from 1)")
		}
		rep.Ready, rep.Start, rep.MaxOp = true, ns[0], ns[0]-1
	case "W":
		ns, err := nums(1)
		if err != nil {
			return err
		}
		if ns[0] < rep.MaxOp {
			return bad(fmt.Sprintf("promise %d below the earlier %d", ns[0], rep.MaxOp))
		}
		rep.MaxOp = ns[0]
	case "F":
		ns, err := nums(1)
		if err != nil {
			return err
		}
		if ns[1] > rep.MaxOp {
			return bad(fmt.Sprintf("flush covers op %d, above the promise %d", ns[1], rep.MaxOp))
		}
		rep.AckedWM = max(rep.AckedWM, ns[0])
		rep.AckedDone = max(rep.AckedDone, ns[1])
		rep.Flushes++
	case "M":
		ns, err := nums(2)
		if err != nil {
			return err
		}
		if rep.Max == nil {
			rep.Max = map[string]uint64{}
		}
		rep.Max[f[1]] = max(rep.Max[f[1]], ns[0])
	}
	rep.Lines++
	return nil
}

// ReadReport parses report lines from r until EOF. ready, if not nil, is
// called once: after the first line, or at EOF if there is none. On a
// malformed line it returns the report so far and the error (and keeps
// reading to EOF, so that the child never blocks on a full pipe).
func ReadReport(r io.Reader, ready func()) (*Report, error) {
	rep := &Report{}
	sc := bufio.NewScanner(r)
	var perr error
	for sc.Scan() {
		if perr == nil {
			perr = rep.Parse(sc.Text())
		}
		if ready != nil {
			ready()
			ready = nil
		}
	}
	if ready != nil {
		ready()
	}
	_, _ = io.Copy(io.Discard, r)
	if perr != nil {
		return rep, perr
	}
	return rep, sc.Err()
}
