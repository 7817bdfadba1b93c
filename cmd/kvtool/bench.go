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
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf/internal/bench"
)

func benchHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: kvtool bench [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs the workloads of doc/workloads.md (W1 bitslice lookups, W2 key-value")
	fmt.Fprintln(w, "lookups over pebble, W3 contended tables, W4 flush coalescing, W6 flush")
	fmt.Fprintln(w, "throughput, W7 reads under write load, W8 batch writes), kvbuf side by side")
	fmt.Fprintln(w, "with every baseline in this process, on real engines and stores in a")
	fmt.Fprintln(w, "temporary directory that is removed afterwards. Every implementation runs")
	fmt.Fprintln(w, "one warm-up round, then the rounds are interleaved in rotating order (round")
	fmt.Fprintln(w, "r starts with implementation r mod n). For each row it prints the median")
	fmt.Fprintln(w, "time per operation (OP says what one is) and the min-max over rounds,")
	fmt.Fprintln(w, "allocations per operation (runtime.MemStats.Mallocs over the round) and, on")
	fmt.Fprintln(w, "baseline rows, the kvbuf speedup (baseline median / median of the")
	fmt.Fprintln(w, "workload's first kvbuf row; above 1 means kvbuf is faster). W2 rows add the")
	fmt.Fprintln(w, "live heap per pending entry (kvbuf rows also the engine's own count), W4")
	fmt.Fprintln(w, "rows physical syncs per Flush, Flush latency percentiles and coverage")
	fmt.Fprintln(w, "violations, W7 rows reader and writer throughput and latency percentiles.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--cpu runs the parallel workloads (W1 and W2 lookups, W3) in each listed")
	fmt.Fprintln(w, "number of goroutines; their names get -cpuN for N > 1 (default: 1 for W1")
	fmt.Fprintln(w, "and W2, 1,2 for W3).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--workload takes a glob (path.Match: W1/*, W2/get-*, or a family: W4) or,")
	fmt.Fprintln(w, "if no name matches it as a glob, a regular expression searched in the")
	fmt.Fprintln(w, "names. Names:")
	for _, s := range bench.Catalog() {
		line := " "
		for _, name := range s.Workloads {
			if len(line)+1+len(name) > 78 && line != " " {
				fmt.Fprintln(w, line)
				line = "   "
			}
			line += " " + name
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--json writes one JSON object per row to stdout: workload, impl, unit,")
	fmt.Fprintln(w, "goroutines, ns_per_op, ns_per_op_min, ns_per_op_max, allocs_per_op, rounds,")
	fmt.Fprintln(w, "ops_per_round, floor; own rows add ratio_vs (baseline -> baseline time /")
	fmt.Fprintln(w, "this row's time); W2 rows bytes_per_entry (kvbuf rows also")
	fmt.Fprintln(w, "accounted_bytes_per_entry); W3/construct bytes_per_entry (per instance);")
	fmt.Fprintln(w, "W4 rows flushes, syncs_per_flush, violations, p50_flush_ns, p99_flush_ns,")
	fmt.Fprintln(w, "p999_flush_ns; W7 rows reads_per_sec, writes_per_sec, p50_read_ns,")
	fmt.Fprintln(w, "p99_read_ns, p99_read_flush_ns, p99_write_ns.")
	fmt.Fprintln(w, "A progress bar is drawn on stderr when it is a terminal or with --progress.")
	fmt.Fprintln(w)
	printFlags(w, fs, "scale", "seed", "dir", "per-goroutine", "write-rate")
}

// benchRowJSON is one --json line. Field names are those of
// doc/workloads.md.
type benchRowJSON struct {
	Workload               string             `json:"workload"`
	Impl                   string             `json:"impl"`
	Unit                   string             `json:"unit"`
	Goroutines             int                `json:"goroutines"`
	NsPerOp                float64            `json:"ns_per_op"`
	NsPerOpMin             float64            `json:"ns_per_op_min"`
	NsPerOpMax             float64            `json:"ns_per_op_max"`
	AllocsPerOp            float64            `json:"allocs_per_op"`
	Rounds                 int                `json:"rounds"`
	OpsPerRound            int                `json:"ops_per_round"`
	Floor                  bool               `json:"floor,omitempty"`
	RatioVs                map[string]float64 `json:"ratio_vs,omitempty"`
	BytesPerEntry          *float64           `json:"bytes_per_entry,omitempty"`
	AccountedBytesPerEntry *float64           `json:"accounted_bytes_per_entry,omitempty"`
	Flushes                *int64             `json:"flushes,omitempty"`
	SyncsPerFlush          *float64           `json:"syncs_per_flush,omitempty"`
	Violations             *int64             `json:"violations,omitempty"`
	P50FlushNs             *float64           `json:"p50_flush_ns,omitempty"`
	P99FlushNs             *float64           `json:"p99_flush_ns,omitempty"`
	P999FlushNs            *float64           `json:"p999_flush_ns,omitempty"`
	ReadsPerSec            *float64           `json:"reads_per_sec,omitempty"`
	WritesPerSec           *float64           `json:"writes_per_sec,omitempty"`
	P50ReadNs              *float64           `json:"p50_read_ns,omitempty"`
	P99ReadNs              *float64           `json:"p99_read_ns,omitempty"`
	P99ReadFlushNs         *float64           `json:"p99_read_flush_ns,omitempty"`
	P99WriteNs             *float64           `json:"p99_write_ns,omitempty"`
}

func rowJSON(r bench.Row) benchRowJSON {
	j := benchRowJSON{
		Workload: r.Workload, Impl: r.Impl, Unit: r.Unit, Goroutines: r.Goroutines,
		NsPerOp: r.Median, NsPerOpMin: r.Min, NsPerOpMax: r.Max,
		AllocsPerOp: r.AllocsPerOp, Rounds: r.Rounds, OpsPerRound: r.OpsPerRound,
		Floor: r.Floor, RatioVs: r.RatioVs,
	}
	if r.BytesPerEntry != 0 {
		j.BytesPerEntry = &r.BytesPerEntry
	}
	if r.AccountedBytesPerEntry != 0 {
		j.AccountedBytesPerEntry = &r.AccountedBytesPerEntry
	}
	if r.Flushes > 0 {
		spf := r.SyncsPerFlush()
		j.Flushes, j.SyncsPerFlush, j.Violations = &r.Flushes, &spf, &r.Violations
		j.P50FlushNs, j.P99FlushNs, j.P999FlushNs = &r.P50FlushNs, &r.P99FlushNs, &r.P999FlushNs
	}
	if r.ReadsPerSec > 0 {
		j.ReadsPerSec, j.WritesPerSec = &r.ReadsPerSec, &r.WritesPerSec
		j.P50ReadNs, j.P99ReadNs, j.P99ReadFlushNs, j.P99WriteNs = &r.P50ReadNs, &r.P99ReadNs, &r.P99ReadFlushNs, &r.P99WriteNs
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

// parseCPU parses --cpu: a comma-separated list of goroutine counts.
func parseCPU(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("--cpu %q: want a comma-separated list of goroutine counts from 1 to 1024", s)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// cpuFor returns the goroutine counts a workload runs at.
func cpuFor(w *bench.Workload, cpus []int) []int {
	switch {
	case !w.Parallel:
		return []int{1}
	case cpus != nil:
		return cpus
	case strings.HasPrefix(w.Name, "W3/"):
		return []int{1, 2}
	}
	return []int{1}
}

// runBench implements "kvtool bench".
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write one JSON object per row to stdout instead of the table")
	quick := fs.Bool("quick", false, "short run: sizes x0.1, 3 rounds, 20 flushes per W4 goroutine")
	pattern := fs.String("workload", "", "run only the workloads matching `pattern` (glob or regexp)")
	rounds := fs.Int("rounds", 0, "measured rounds per workload, after one warm-up round (default 5, 3 with --quick)")
	cpuList := fs.String("cpu", "", "run the parallel workloads in each of these goroutine `counts` (e.g. 1,2)")
	svg := fs.String("svg", "", "write a chart of the kvbuf speedups to `file` (SVG)")
	force := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	// Hidden: for tests and experiments.
	scale := fs.Float64("scale", 0, "size multiplier (default 1, 0.1 with --quick)")
	seed := fs.Uint64("seed", 1, "random seed")
	dir := fs.String("dir", "", "parent directory of the temporary engines (default $TMPDIR)")
	perG := fs.Int("per-goroutine", 0, "W4 {write, Flush} iterations per goroutine per round (default 200, 20 with --quick)")
	writeRate := fs.Int("write-rate", 0, "W7 writes per second (default 100000)")
	pos, code, done := parseFlags(fs, args, func(w io.Writer) { benchHelp(w, fs) }, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "bench", fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	cfg := bench.Config{Dir: *dir, Scale: 1, Seed: *seed, FlushesPerGoroutine: bench.DefaultFlushesPerGoroutine, WriteRate: bench.DefaultWriteRate}
	nRounds := 5
	if *quick {
		cfg.Scale, cfg.FlushesPerGoroutine, nRounds = 0.1, 20, 3
	}
	if *scale != 0 {
		cfg.Scale = *scale
	}
	if *perG != 0 {
		cfg.FlushesPerGoroutine = *perG
	}
	if *writeRate != 0 {
		cfg.WriteRate = *writeRate
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
	case cfg.WriteRate < 1:
		return usageError(stderr, "bench", fmt.Sprintf("--write-rate %d: want at least 1", cfg.WriteRate))
	}
	cpus, err := parseCPU(*cpuList)
	if err != nil {
		return usageError(stderr, "bench", err.Error())
	}
	names, err := selectWorkloads(*pattern)
	if err != nil {
		return usageError(stderr, "bench", err.Error())
	}

	// One progress unit per round (warm-up included) of each run of a
	// workload, plus one per suite setup.
	var suites []string
	units := 0.0
	for _, s := range bench.Catalog() {
		sel := false
		for _, w := range s.Workloads {
			if !slices.Contains(names, w) {
				continue
			}
			sel = true
			runs := 1
			if slices.Contains(s.Parallel, w) {
				runs = len(cpuFor(&bench.Workload{Name: w, Parallel: true}, cpus))
			}
			units += float64(runs * (nRounds + 1))
		}
		if sel {
			suites = append(suites, s.Name)
			units++
		}
	}
	p := newProgress(stderr, *force, units)
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
			for _, g := range cpuFor(w, cpus) {
				n := float64(len(w.Impls))
				label := w.NameAt(g)
				wrows, err := w.Run(ctx, nRounds, g, func(impl string, r int) {
					round := "warm-up"
					if r >= 0 {
						round = fmt.Sprintf("round %d/%d", r+1, nRounds)
					}
					p.add(1/n, fmt.Sprintf("%s/%s %s", label, impl, round))
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
		}
		if err := s.Close(); err != nil {
			p.finish()
			return fail(stderr, "bench", err)
		}
	}
	p.add(units, "done") // the fractions of the steps need not add up to exactly 100%
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

// fmtRate formats a rate per second with three significant digits.
func fmtRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.3gM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.3gk", r/1e3)
	}
	return fmt.Sprintf("%.3g", r)
}

func benchHeader(cfg bench.Config, rounds int) string {
	return fmt.Sprintf("%d rounds after 1 warm-up, scale %g, W4 %d flushes/goroutine, W7 %d writes/s, GOMAXPROCS %d, %s %s/%s",
		rounds, cfg.Scale, cfg.FlushesPerGoroutine, cfg.WriteRate, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// family is the suite a row belongs to ("W1", ...).
func family(workload string) string {
	f, _, _ := strings.Cut(workload, "/")
	return f
}

// printBenchTable prints one table per workload family, each with the
// columns its rows fill.
func printBenchTable(w io.Writer, rows []bench.Row, cfg bench.Config, rounds int) {
	fmt.Fprintf(w, "kvtool bench: %s\n", benchHeader(cfg, rounds))
	// The reference of each workload's speedups: its first own row.
	ref := map[string]float64{}
	for _, r := range rows {
		if _, ok := ref[r.Workload]; !ok && bench.IsOwn(r.Impl) {
			ref[r.Workload] = r.Median
		}
	}
	var fams []string
	for _, r := range rows {
		if f := family(r.Workload); !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	for _, f := range fams {
		var fr []bench.Row
		for _, r := range rows {
			if family(r.Workload) == f {
				fr = append(fr, r)
			}
		}
		mem := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.BytesPerEntry != 0 })
		flushes := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.Flushes > 0 })
		reads := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.ReadsPerSec > 0 })
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head := "WORKLOAD\tIMPL\tOP\tTIME/OP\tMIN-MAX\tALLOCS/OP\tKVBUF SPEEDUP"
		if mem {
			head += "\tBYTES/ENTRY"
		}
		if flushes {
			head += "\tSYNCS/FLUSH\tP50 FLUSH\tP99 FLUSH\tP999 FLUSH\tVIOLATIONS"
		}
		if reads {
			head += "\tREADS/S\tWRITES/S\tP50 READ\tP99 READ\tP99 READ@FLUSH\tP99 WRITE"
		}
		fmt.Fprintln(tw, head)
		for _, r := range fr {
			speed := "-"
			if k := ref[r.Workload]; !bench.IsOwn(r.Impl) && k > 0 {
				speed = fmt.Sprintf("%.2fx", r.Median/k)
			}
			impl := r.Impl
			if r.Floor {
				impl += " (floor)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s-%s\t%.3g\t%s", r.Workload, impl, r.Unit, fmtNs(r.Median), fmtNs(r.Min), fmtNs(r.Max), r.AllocsPerOp, speed)
			if mem {
				m := "-"
				if r.BytesPerEntry != 0 {
					m = fmt.Sprintf("%.0f", r.BytesPerEntry)
					if r.AccountedBytesPerEntry != 0 {
						m += fmt.Sprintf(" (engine %.0f)", r.AccountedBytesPerEntry)
					}
				}
				fmt.Fprintf(tw, "\t%s", m)
			}
			if flushes {
				if r.Flushes > 0 {
					fmt.Fprintf(tw, "\t%.3f\t%s\t%s\t%s\t%d", r.SyncsPerFlush(), fmtNs(r.P50FlushNs), fmtNs(r.P99FlushNs), fmtNs(r.P999FlushNs), r.Violations)
				} else {
					fmt.Fprint(tw, "\t\t\t\t\t")
				}
			}
			if reads {
				if r.ReadsPerSec > 0 {
					inFlush := "-" // no read was sampled while a flush ran
					if r.P99ReadFlushNs > 0 {
						inFlush = fmtNs(r.P99ReadFlushNs)
					}
					fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\t%s", fmtRate(r.ReadsPerSec), fmtRate(r.WritesPerSec),
						fmtNs(r.P50ReadNs), fmtNs(r.P99ReadNs), inFlush, fmtNs(r.P99WriteNs))
				} else {
					fmt.Fprint(tw, "\t\t\t\t\t\t")
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "KVBUF SPEEDUP = baseline median / median of the workload's first kvbuf row (above 1: kvbuf is faster).")
	fmt.Fprintln(w, "Floor rows do less work (they read without the pending changes): lower bounds, not equivalents.")
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.BytesPerEntry != 0 }) {
		fmt.Fprintln(w, "BYTES/ENTRY = live heap per pending entry (W3/construct: per instance); (engine N) = Metrics.PendingBytes / PendingKeys.")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.Flushes > 0 }) {
		fmt.Fprintln(w, "W4: VIOLATIONS are Flush calls that returned before the caller's own write was durable (read back from the store).")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.ReadsPerSec > 0 }) {
		fmt.Fprintln(w, "W7: TIME/OP is per read of the reader; READ@FLUSH are reads sampled while a flush ran; every 64th read and write is timed.")
	}
}
