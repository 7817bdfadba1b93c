package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf/internal/bench"
)

func benchHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: kvtool bench [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs workloads W1 (bitslice lookups), W2 (key-value lookups over pebble) and")
	fmt.Fprintln(w, "W4 (flush coalescing) of workloads.md, kvbuf side by side with every")
	fmt.Fprintln(w, "baseline in this process, on real engines and stores in a temporary")
	fmt.Fprintln(w, "directory that is removed afterwards. Rounds are interleaved in rotating")
	fmt.Fprintln(w, "order (round r starts with implementation r mod n). For each row it prints")
	fmt.Fprintln(w, "the median time per operation and the min-max over rounds, allocations per")
	fmt.Fprintln(w, "operation (runtime.MemStats.Mallocs over the timed loop), and on baseline")
	fmt.Fprintln(w, "rows the kvbuf speedup (baseline median / kvbuf median; above 1 means kvbuf")
	fmt.Fprintln(w, "is faster). W4 rows add physical syncs per Flush call, p99 Flush latency and")
	fmt.Fprintln(w, "coverage violations.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--workload takes a glob (path.Match: W1/*, W2/get-*) or, if no name matches")
	fmt.Fprintln(w, "it as a glob, a regular expression searched in the names. Names:")
	for _, s := range bench.Catalog() {
		fmt.Fprintf(w, "  %s\n", strings.Join(s.Workloads, " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--json writes one JSON object per row to stdout: workload, impl, ns_per_op,")
	fmt.Fprintln(w, "ns_per_op_min, ns_per_op_max, allocs_per_op, rounds, ops_per_round, floor;")
	fmt.Fprintln(w, "kvbuf rows add ratio_vs (baseline -> baseline time / kvbuf time); W4 rows")
	fmt.Fprintln(w, "add flushes, syncs_per_flush, violations, p50_flush_ns, p99_flush_ns.")
	fmt.Fprintln(w, "A progress bar is drawn on stderr when it is a terminal or with --progress.")
	fmt.Fprintln(w)
	printFlags(w, fs, "scale", "seed", "dir", "per-goroutine")
}

// benchRowJSON is one --json line. Field names are those of workloads.md.
type benchRowJSON struct {
	Workload      string             `json:"workload"`
	Impl          string             `json:"impl"`
	NsPerOp       float64            `json:"ns_per_op"`
	NsPerOpMin    float64            `json:"ns_per_op_min"`
	NsPerOpMax    float64            `json:"ns_per_op_max"`
	AllocsPerOp   float64            `json:"allocs_per_op"`
	Rounds        int                `json:"rounds"`
	OpsPerRound   int                `json:"ops_per_round"`
	Floor         bool               `json:"floor,omitempty"`
	RatioVs       map[string]float64 `json:"ratio_vs,omitempty"`
	Flushes       *int64             `json:"flushes,omitempty"`
	SyncsPerFlush *float64           `json:"syncs_per_flush,omitempty"`
	Violations    *int64             `json:"violations,omitempty"`
	P50FlushNs    *float64           `json:"p50_flush_ns,omitempty"`
	P99FlushNs    *float64           `json:"p99_flush_ns,omitempty"`
}

func rowJSON(r bench.Row) benchRowJSON {
	j := benchRowJSON{
		Workload: r.Workload, Impl: r.Impl,
		NsPerOp: r.Median, NsPerOpMin: r.Min, NsPerOpMax: r.Max,
		AllocsPerOp: r.AllocsPerOp, Rounds: r.Rounds, OpsPerRound: r.OpsPerRound,
		Floor: r.Floor, RatioVs: r.RatioVs,
	}
	if r.Flushes > 0 {
		spf := r.SyncsPerFlush()
		j.Flushes, j.SyncsPerFlush, j.Violations = &r.Flushes, &spf, &r.Violations
		j.P50FlushNs, j.P99FlushNs = &r.P50FlushNs, &r.P99FlushNs
	}
	return j
}

// selectWorkloads returns the catalog's workload names matching pattern,
// in catalog order: as a glob (also matching a suite name: "W1" selects
// all of W1) if that matches anything, else as a regular expression.
func selectWorkloads(pattern string) ([]string, error) {
	var all []string
	for _, s := range bench.Catalog() {
		for _, w := range s.Workloads {
			if pattern == "" {
				all = append(all, w)
				continue
			}
			ok, err := path.Match(pattern, w)
			if !ok && err == nil {
				ok, err = path.Match(pattern, s.Name)
			}
			if ok && err == nil {
				all = append(all, w)
			}
		}
	}
	if len(all) > 0 {
		return all, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("--workload %q is neither a matching glob nor a regular expression: %v", pattern, err)
	}
	for _, s := range bench.Catalog() {
		for _, w := range s.Workloads {
			if re.MatchString(w) {
				all = append(all, w)
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("--workload %q matches no workload name", pattern)
	}
	return all, nil
}

// runBench implements "kvtool bench".
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write one JSON object per row to stdout instead of the table")
	quick := fs.Bool("quick", false, "short run: sizes x0.1, 3 rounds, 4 flushes per W4 goroutine")
	pattern := fs.String("workload", "", "run only the workloads matching `pattern` (glob or regexp)")
	rounds := fs.Int("rounds", 0, "rounds per workload (default 5, 3 with --quick)")
	svg := fs.String("svg", "", "write a chart of the kvbuf speedups to `file` (SVG)")
	force := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	// Hidden: for tests and experiments.
	scale := fs.Float64("scale", 0, "size multiplier (default 1, 0.1 with --quick)")
	seed := fs.Uint64("seed", 1, "random seed")
	dir := fs.String("dir", "", "parent directory of the temporary engines (default $TMPDIR)")
	perG := fs.Int("per-goroutine", 0, "W4 {write, Flush} iterations per goroutine per round (default 8, 4 with --quick)")
	pos, code, done := parseFlags(fs, args, func(w io.Writer) { benchHelp(w, fs) }, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "bench", fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	cfg := bench.Config{Dir: *dir, Scale: 1, Seed: *seed, FlushesPerGoroutine: 8}
	nRounds := 5
	if *quick {
		cfg.Scale, cfg.FlushesPerGoroutine, nRounds = 0.1, 4, 3
	}
	if *scale != 0 {
		cfg.Scale = *scale
	}
	if *perG != 0 {
		cfg.FlushesPerGoroutine = *perG
	}
	if *rounds != 0 {
		nRounds = *rounds
	}
	switch {
	case nRounds < 1:
		return usageError(stderr, "bench", fmt.Sprintf("--rounds %d: want at least 1", nRounds))
	case !(cfg.Scale > 0 && cfg.Scale <= 100):
		return usageError(stderr, "bench", fmt.Sprintf("--scale %v: want 0 < scale <= 100", cfg.Scale))
	case cfg.FlushesPerGoroutine < 1:
		return usageError(stderr, "bench", fmt.Sprintf("--per-goroutine %d: want at least 1", cfg.FlushesPerGoroutine))
	}
	names, err := selectWorkloads(*pattern)
	if err != nil {
		return usageError(stderr, "bench", err.Error())
	}

	// One progress unit per workload round, plus one per suite setup.
	var suites []string
	for _, s := range bench.Catalog() {
		if slices.ContainsFunc(s.Workloads, func(w string) bool { return slices.Contains(names, w) }) {
			suites = append(suites, s.Name)
		}
	}
	p := newProgress(stderr, *force, float64(len(suites)+len(names)*nRounds))
	var rows []bench.Row
	enc := json.NewEncoder(stdout)
	for _, name := range suites {
		p.add(0, "setting up "+name)
		s, err := bench.Open(ctx, name, &cfg)
		if err != nil {
			p.finish()
			return fail(stderr, "bench", err)
		}
		p.add(1, "set up "+name)
		for _, w := range s.Workloads {
			if !slices.Contains(names, w.Name) {
				continue
			}
			n := float64(len(w.Impls))
			wrows, err := w.Run(ctx, nRounds, func(impl string, r int) {
				p.add(1/n, fmt.Sprintf("%s/%s round %d/%d", w.Name, impl, r+1, nRounds))
			})
			if err != nil {
				p.finish()
				s.Close()
				return fail(stderr, "bench", err)
			}
			rows = append(rows, wrows...)
			if *asJSON {
				p.finish()
				for _, r := range wrows {
					if err := enc.Encode(rowJSON(r)); err != nil {
						s.Close()
						return fail(stderr, "bench", err)
					}
				}
			}
		}
		if err := s.Close(); err != nil {
			p.finish()
			return fail(stderr, "bench", err)
		}
	}
	p.finish()
	if !*asJSON {
		printBenchTable(stdout, rows, cfg, nRounds)
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(benchSVG(rows, cfg, nRounds)), 0o644); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	return exitOK
}

// fmtNs formats nanoseconds with a unit and three significant digits.
func fmtNs(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	}
	return fmt.Sprintf("%.3gns", ns)
}

func benchHeader(cfg bench.Config, rounds int) string {
	return fmt.Sprintf("%d rounds, scale %g, W4 %d flushes/goroutine, GOMAXPROCS %d, %s %s/%s",
		rounds, cfg.Scale, cfg.FlushesPerGoroutine, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printBenchTable(w io.Writer, rows []bench.Row, cfg bench.Config, rounds int) {
	w4 := slices.ContainsFunc(rows, func(r bench.Row) bool { return r.Flushes > 0 })
	fmt.Fprintf(w, "kvtool bench: %s\n\n", benchHeader(cfg, rounds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "WORKLOAD\tIMPL\tTIME/OP\tMIN-MAX\tALLOCS/OP\tKVBUF SPEEDUP"
	if w4 {
		head += "\tSYNCS/FLUSH\tP99 FLUSH\tVIOLATIONS"
	}
	fmt.Fprintln(tw, head)
	kvbufMedian := map[string]float64{}
	for _, r := range rows {
		if r.Impl == bench.ImplKvbuf {
			kvbufMedian[r.Workload] = r.Median
		}
	}
	for _, r := range rows {
		speed := "-"
		if k := kvbufMedian[r.Workload]; !bench.IsOwn(r.Impl) && k > 0 {
			speed = fmt.Sprintf("%.2fx", r.Median/k)
		}
		impl := r.Impl
		if r.Floor {
			impl += " (floor)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s-%s\t%.3g\t%s", r.Workload, impl, fmtNs(r.Median), fmtNs(r.Min), fmtNs(r.Max), r.AllocsPerOp, speed)
		if w4 {
			if r.Flushes > 0 {
				fmt.Fprintf(tw, "\t%.3f\t%s\t%d", r.SyncsPerFlush(), fmtNs(r.P99FlushNs), r.Violations)
			} else {
				fmt.Fprint(tw, "\t\t\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "KVBUF SPEEDUP = baseline median / kvbuf median (above 1: kvbuf is faster).")
	fmt.Fprintln(w, "Floor rows read without the pending changes: lower bounds, not equivalents.")
	if w4 {
		fmt.Fprintln(w, "W4: TIME/OP is per write+Flush; VIOLATIONS are Flush calls that returned before the caller's write was durable.")
	}
}
