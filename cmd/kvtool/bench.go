package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf/bench"
)

func benchHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: kvtool bench [flags]

Runs the workloads of doc/workloads.md (W1 bitslice lookups, W2 key-value
lookups, scans and memory over pebble, W3 contended tables, W4 flush
coalescing, W6 flush throughput, W7 reads under write load, W8 batch
writes, W10 sparse bitslices, W11 1,000 engines under one memory budget;
W5, the flusher's drain gate, is a go test benchmark of package flush,
W9 a raftkv one), kvbuf side by side with every baseline in this process, through
kvbuf's public API, on real engines and stores in a temporary directory that
is removed afterwards. Every implementation runs one warm-up round, then
the measured rounds, each running every implementation once in an order
that gives each one every position (a Williams design). Rows that write
read back what they wrote after each round and the run fails on a
difference (a sample of 1000 values per round; every value with --quick).
For each row it prints the median time per operation (OP says what one
`)
	fmt.Fprintf(w, "is) and the min-max over rounds (marked * when the max exceeds %gx the\n", bench.NoisyRatio)
	fmt.Fprint(w, `min), the user+system CPU time per operation of the whole process over the
timed part (so that work moved to other goroutines and cores counts),
allocations per operation (runtime.MemStats.Mallocs over the timed part)
and, on baseline rows, the kvbuf speedup: in each round the baseline's time
over the workload's first kvbuf row's, the median over rounds with its
min-max (above 1 means kvbuf is faster; * when noisy). NOTE says why a row
is no headline (write only, a component). Rows that write user data (W4,
W6, W8's puts, W11) add DISK/USER B, the bytes the process wrote to disk
(Linux /proc/self/io, every goroutine) from the start of each round
through a settle step after it that flushes the stores' memtables (W6,
W8: those whose log holds 64 KiB or more) and waits out their
compactions, over the keys and values the round's
operations carried (bit Sets: one bit each): the median over rounds,
absent where nothing is counted (another OS, tmpfs). Memory rows add the live heap
per entry (kvbuf rows also the engine's own count), W4 rows physical syncs
per Flush, Flush latency percentiles and coverage violations (a lower
bound), W7 rows reader and writer throughput and latency percentiles.

--cpu runs the parallel workloads (W1 and W2 lookups, W3) in each listed
number of goroutines; their names get -cpuN for N > 1 (default: 1 for W1
and W2, 1,2 for W3).

--workload takes a glob (path.Match: W1/*, W2/get-*, or a family: W4) or,
if it matches no name as a glob and uses regular-expression syntax (one of
^$|()+{}.\) or no glob syntax (*?[), a regular expression searched in the
names (scan, g(1|4)$). A pattern that selects nothing is a usage error.
Names:
`)
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
	fmt.Fprint(w, `
--json writes one JSON object per row to stdout: workload, impl, unit,
goroutines, ns_per_op, ns_per_op_min, ns_per_op_max, noisy, cpu_ns_per_op,
allocs_per_op, rounds, ops_per_round, floor, label, read_back, busy_rounds
(rounds whose quiesce or settle step found a store still busy at its
deadline; left out when none did); rows that
write disk_bytes_per_user_byte (over all rounds: disk bytes summed over
user bytes summed) and disk_bytes_per_user_byte_rounds (per round); own
rows add ratio_vs, ratio_vs_min, ratio_vs_max (baseline -> median, min and
max over rounds of the baseline's time / this row's in the same round),
ratio_vs_noisy, cpu_ratio_vs and disk_ratio_vs (baseline's disk figure
over all rounds / this row's); memory rows bytes_per_entry (kvbuf rows
also accounted_bytes_per_entry); W4 rows flushes, syncs_per_flush,
violations, p50_flush_ns, p99_flush_ns, p999_flush_ns; W7 rows
reads_per_sec, writes_per_sec, p50_read_ns, p99_read_ns, p99_read_flush_ns,
p99_write_ns; W11 rows engine_min_share, engine_max_share, engine_min_lat,
engine_max_lat, budget_peak, budget_gen, budget_over_gen.
go run ./scripts/benchtable turns that output into the README's tables.
A progress bar is drawn on stderr when it is a terminal or with --progress.

On SIGINT or SIGTERM it stops after the round in progress, prints the rows
it finished, removes its temporary directory and exits with status 1.

`)
	printFlags(w, fs)
}

// regexpOnly are the characters of regular-expression syntax that a glob
// does not have, and globMeta those of glob syntax (path.Match).
const (
	regexpOnly = `^$|()+{}.\`
	globMeta   = `*?[`
)

// selectWorkloads returns the catalog's workload names matching pattern,
// in catalog order: as a glob (also matching a family: "W1" selects all of
// W1) if that matches anything; else, if the pattern uses regexp syntax or
// no glob syntax at all, as a regular expression searched in the names
// ("scan", "g(1|4)$"). A glob that matches nothing ("W9*") is not retried
// as a regexp, which might match everything. Anything that selects nothing
// is an error naming every workload.
func selectWorkloads(pattern string) ([]string, error) {
	var all, sel []string
	badGlob := false
	for _, s := range bench.Catalog() {
		for _, w := range s.Workloads {
			all = append(all, w)
			ok, err := path.Match(pattern, w)
			if !ok && err == nil {
				ok, err = path.Match(pattern, bench.Family(w))
			}
			badGlob = badGlob || err != nil
			if pattern == "" || ok && err == nil {
				sel = append(sel, w)
			}
		}
	}
	if len(sel) > 0 {
		return sel, nil
	}
	names := "the workloads are " + strings.Join(all, ", ")
	if strings.ContainsAny(pattern, globMeta) && !strings.ContainsAny(pattern, regexpOnly) {
		if badGlob {
			return nil, fmt.Errorf("--workload %q: %v; %s", pattern, path.ErrBadPattern, names)
		}
		return nil, fmt.Errorf("--workload %q matches no workload; %s", pattern, names)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("--workload %q matches no workload as a glob and is not a regular expression (%v)", pattern, err)
	}
	for _, w := range all {
		if re.MatchString(w) {
			sel = append(sel, w)
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("--workload %q matches no workload as a glob or a regular expression; %s", pattern, names)
	}
	return sel, nil
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
func cpuFor(name string, parallel bool, cpus []int) []int {
	switch {
	case !parallel:
		return []int{1}
	case cpus != nil:
		return cpus
	case bench.Family(name) == "W3":
		return []int{1, 2}
	}
	return []int{1}
}

// benchArgs are kvtool bench's parsed flags.
type benchArgs struct {
	cfg      bench.Config
	rounds   int
	names    []string
	cpus     []int
	asJSON   bool
	svg      string
	progress bool
	cpuProf  string
}

// parseBench parses kvtool bench's arguments; done is set when the caller
// should return code at once (help, usage error).
func parseBench(args []string, stdout, stderr io.Writer) (a benchArgs, code int, done bool) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write one JSON object per row to stdout instead of the table")
	quick := fs.Bool("quick", false, "short run: sizes x0.1, 3 rounds, 20 flushes per W4 goroutine, every written value read back")
	pattern := fs.String("workload", "", "run only the workloads matching `pattern` (glob or regexp)")
	rounds := fs.Int("rounds", 0, fmt.Sprintf("measured rounds per workload, after one warm-up round (default %d, or the workload's number of implementations if larger, so that each runs at every position; 3 with --quick)", bench.DefaultRounds))
	cpuList := fs.String("cpu", "", "run the parallel workloads in each of these goroutine `counts` (e.g. 1,2)")
	svg := fs.String("svg", "", "write a chart of the kvbuf speedups to `file` (SVG)")
	force := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	scale := fs.Float64("scale", 1, "size multiplier of every workload (0.1 with --quick; at most 100)")
	seed := fs.Uint64("seed", 1, "seed of every random input")
	dir := fs.String("dir", "", "parent `directory` of the temporary engines and stores (default $TMPDIR)")
	perG := fs.Int("per-goroutine", bench.DefaultFlushesPerGoroutine, "W4 {write, Flush} iterations per goroutine per round (20 with --quick)")
	writeRate := fs.Int("write-rate", bench.DefaultWriteRate, "W7 writes per second")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole run (set-up, warm-up and every implementation) to `file`, for go tool pprof")
	pos, code, done := parseFlags(fs, args, func(w io.Writer) { benchHelp(w, fs) }, stdout, stderr)
	if done {
		return a, code, true
	}
	if len(pos) != 0 {
		return a, usageError(stderr, "bench", fmt.Sprintf("unexpected argument %q", pos[0])), true
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	a = benchArgs{asJSON: *asJSON, svg: *svg, progress: *force, rounds: *rounds, cpuProf: *cpuProf,
		cfg: bench.Config{Dir: *dir, Scale: *scale, Seed: *seed, FlushesPerGoroutine: *perG, WriteRate: *writeRate}}
	if *quick { // explicit flags win over --quick's values
		for name, p := range map[string]func(){
			"scale":         func() { a.cfg.Scale = 0.1 },
			"rounds":        func() { a.rounds = 3 },
			"per-goroutine": func() { a.cfg.FlushesPerGoroutine = 20 },
		} {
			if !set[name] {
				p()
			}
		}
		a.cfg.ReadBack = -1 // every value a write row wrote is read back
	}
	var msg string
	switch {
	case set["rounds"] && a.rounds < 1:
		msg = fmt.Sprintf("--rounds %d: want at least 1", a.rounds)
	case !(a.cfg.Scale > 0 && a.cfg.Scale <= 100):
		msg = fmt.Sprintf("--scale %v: want 0 < scale <= 100", a.cfg.Scale)
	case a.cfg.FlushesPerGoroutine < 1:
		msg = fmt.Sprintf("--per-goroutine %d: want at least 1", a.cfg.FlushesPerGoroutine)
	case a.cfg.WriteRate < 1:
		msg = fmt.Sprintf("--write-rate %d: want at least 1", a.cfg.WriteRate)
	case *seed == 0:
		msg = "--seed 0: want a seed of at least 1"
	}
	if msg != "" {
		return a, usageError(stderr, "bench", msg), true
	}
	var err error
	if a.cpus, err = parseCPU(*cpuList); err != nil {
		return a, usageError(stderr, "bench", err.Error()), true
	}
	if a.names, err = selectWorkloads(*pattern); err != nil {
		return a, usageError(stderr, "bench", err.Error()), true
	}
	return a, exitOK, false
}

// runBench implements "kvtool bench".
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a, code, done := parseBench(args, stdout, stderr)
	if done {
		return code
	}
	// One progress unit per run of a workload (its rounds, warm-up
	// included, share it), plus one per suite setup.
	var suites []string
	units := 0.0
	for _, s := range bench.Catalog() {
		sel := false
		for _, w := range s.Workloads {
			if !slices.Contains(a.names, w) {
				continue
			}
			sel = true
			units += float64(len(cpuFor(w, slices.Contains(s.Parallel, w), a.cpus)))
		}
		if sel {
			suites = append(suites, s.Name)
			units++
		}
	}
	if a.cpuProf != "" {
		stop, err := startCPUProfile(a.cpuProf)
		if err != nil {
			return fail(stderr, "bench", err)
		}
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(stderr, "kvtool bench: %s\n", errText(err))
			}
		}()
	}
	p := newProgress(stderr, a.progress, units)
	enc := json.NewEncoder(stdout)
	emit := func(rows []bench.Row) error {
		if !a.asJSON {
			return nil
		}
		p.finish()
		for _, r := range rows {
			if err := enc.Encode(r.JSON()); err != nil {
				return err
			}
		}
		return nil
	}
	rows, err := runSuites(ctx, a, suites, p, emit)
	if err == nil {
		p.add(units, "done") // the fractions of the steps need not add up to exactly 100%
	}
	p.finish()
	if !a.asJSON && (err == nil || ctx.Err() != nil) {
		printBenchTable(stdout, rows, a.cfg, a.rounds)
	}
	if err == nil && a.svg != "" {
		err = os.WriteFile(a.svg, []byte(benchSVG(rows, a.cfg, a.rounds)), 0o644)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%v): %d finished rows printed, temporary files removed", context.Cause(ctx), len(rows))
		}
		return fail(stderr, "bench", err)
	}
	return exitOK
}

// openSuite sets up a suite: bench.Open, replaced by tests that need a
// suite with a row of their own.
var openSuite = bench.Open

// runSuites sets up each suite in turn, runs its selected workloads
// (passing each workload's rows to emit as they finish) and closes it,
// which removes its directory. It returns the rows it finished, also when
// it stops at an error or at the end of ctx.
func runSuites(ctx context.Context, a benchArgs, suites []string, p *progress, emit func([]bench.Row) error) ([]bench.Row, error) {
	var rows []bench.Row
	for _, name := range suites {
		p.add(0, "setting up "+name)
		s, err := openSuite(ctx, name, &a.cfg)
		if err != nil {
			return rows, err
		}
		p.add(1, "set up "+name)
		var info bench.SuiteInfo
		for _, si := range bench.Catalog() {
			if si.Name == name {
				info = si
			}
		}
		for _, w := range s.Workloads {
			if !slices.Contains(a.names, w.Name) {
				continue
			}
			for _, g := range cpuFor(w.Name, slices.Contains(info.Parallel, w.Name), a.cpus) {
				rounds := roundsFor(a.rounds, len(w.Impls))
				steps := float64(len(w.Impls) * (rounds + 1))
				label := w.NameAt(g)
				wrows, err := w.Run(ctx, rounds, g, func(impl string, r int) {
					round := "warm-up"
					if r >= 0 {
						round = fmt.Sprintf("round %d/%d", r+1, rounds)
					}
					p.add(1/steps, fmt.Sprintf("%s/%s %s", label, impl, round))
				})
				if err == nil {
					rows = append(rows, wrows...)
					err = emit(wrows)
				}
				if err != nil {
					return rows, errors.Join(err, s.Close())
				}
			}
		}
		if err := s.Close(); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// roundsFor is the number of measured rounds of a workload of n
// implementations: rounds (--rounds) if set, else bench.DefaultRounds or n
// if larger, so that every implementation runs once at every position
// (bench.RoundOrder).
func roundsFor(rounds, n int) int {
	if rounds > 0 {
		return rounds
	}
	return max(bench.DefaultRounds, n)
}

// roundsText describes --rounds for the headers.
func roundsText(rounds int) string {
	if rounds > 0 {
		return fmt.Sprintf("%d rounds", rounds)
	}
	return fmt.Sprintf("%d rounds or one per implementation", bench.DefaultRounds)
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
	dir := cfg.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	readBack := "every written value read back"
	if cfg.ReadBack >= 0 {
		readBack = fmt.Sprintf("%d written values read back per round", cmp.Or(cfg.ReadBack, bench.DefaultReadBack))
	}
	return fmt.Sprintf("%s after 1 warm-up, scale %g, %s, W4 %d flushes/goroutine, W7 %d writes/s, GOMAXPROCS %d, %s %s/%s, %s on %s",
		roundsText(rounds), cfg.Scale, readBack, cfg.FlushesPerGoroutine, cfg.WriteRate, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, dir, fsType(dir))
}

// printBenchTable prints one table per workload family, each with the
// columns its rows fill.
func printBenchTable(w io.Writer, rows []bench.Row, cfg bench.Config, rounds int) {
	fmt.Fprintf(w, "kvtool bench: %s\n", benchHeader(cfg, rounds))
	// The reference of each workload's speedups: its first own row.
	ref := map[string]bench.Row{}
	for _, r := range rows {
		if _, ok := ref[r.Workload]; !ok && bench.IsOwn(r.Impl) {
			ref[r.Workload] = r
		}
	}
	var fams []string
	for _, r := range rows {
		if f := bench.Family(r.Workload); !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	for _, f := range fams {
		var fr []bench.Row
		for _, r := range rows {
			if bench.Family(r.Workload) == f {
				fr = append(fr, r)
			}
		}
		printFamily(w, fr, ref)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "KVBUF SPEEDUP = baseline time / the workload's first kvbuf row's, per round: median (min-max over rounds); above 1: kvbuf is faster.")
	fmt.Fprintf(w, "MIN-MAX and SPEEDUP marked * : the largest exceeds %gx the smallest (noisy). CPU/OP: user+system CPU of the process over the timed part.\n", bench.NoisyRatio)
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return len(r.DiskBytesPerUserByte) > 0 }) {
		fmt.Fprintln(w, "DISK/USER B = bytes the process wrote to disk per byte of user data (keys and values; bit Sets: one bit each), the round and a settle step after it (memtables flushed, in W6 and W8 those whose log holds 64 KiB or more; compactions waited out): over all rounds (their disk bytes summed over their user bytes summed), then the per-round min-max; - where a settle step found a store still busy at its deadline, or the figure is negative (pages of other, removed files taken back from the count).")
	}
	fmt.Fprintln(w, "NOTE: why a row is not a headline (doc/workloads.md, \"Fairness\"). Floor rows do less work: lower bounds, not equivalents.")
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.BusyRounds > 0 }) {
		fmt.Fprintln(w, "STORE BUSY N/M ROUNDS (in NOTE): in N of the row's M rounds a quiesce step before the round (the round may have been timed during a flush or compaction) or a settle step after it (no disk figure) found a store still busy at its deadline.")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.BytesPerEntry != 0 }) {
		fmt.Fprintln(w, "BYTES/ENTRY = live heap per entry (W3/construct: per instance); (engine N) = Metrics.PendingBytes / PendingKeys.")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.Flushes > 0 }) {
		fmt.Fprintln(w, "W4: VIOLATIONS (a lower bound) are Flush calls that returned before the durable watermark covered the caller's own write.")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.BudgetPeak > 0 }) {
		fmt.Fprintln(w, "W11: ENGINE PUTS/MEAN = the fewest and most puts an engine made (each put to an engine drawn at random by a fixed pool of writers) once the budget passed its high mark, over the mean (worst round); ENGINE LAT/MEAN = the least and most mean put latency of an engine then, over the mean of every put (worst round; an engine starves if its puts take longer: the target 0.5-2); PEAK/BUDGET = the budget's highest total over its size; GEN/BUDGET = the mean generation the budget forced to flush (an engine's share when chosen) over its size (the smallest of the rounds); OVER/GEN = how far the total passed the size, in that round's mean forced generations (the largest of the rounds; the target: at most 1).")
	}
	if slices.ContainsFunc(rows, func(r bench.Row) bool { return r.ReadsPerSec > 0 }) {
		fmt.Fprintln(w, "W7: TIME/OP is per read of the reader; READ@FLUSH are reads sampled while a flush ran; every 64th read and write is timed.")
	}
}

// noteText is a row's NOTE: its label, then "store busy N/M rounds" when
// the quiesce or settle step of N of its M rounds found a store still
// busy at its deadline (bench.Row.BusyRounds).
func noteText(r bench.Row) string {
	if r.BusyRounds == 0 {
		return r.Label
	}
	busy := fmt.Sprintf("store busy %d/%d rounds", r.BusyRounds, r.Rounds)
	if r.Label == "" {
		return busy
	}
	return r.Label + "; " + busy
}

// speedupText formats the ratio of a baseline row to own (per round:
// median (min-max), * when noisy), or "-".
func speedupText(own bench.Row, impl string) string {
	ra, ok := own.Ratios[impl]
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%.2fx (%.2f-%.2f)", ra.Median, ra.Min, ra.Max)
	if ra.Noisy {
		s += " *"
	}
	return s
}

// printFamily prints one family's table.
func printFamily(w io.Writer, fr []bench.Row, ref map[string]bench.Row) {
	mem := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.BytesPerEntry != 0 })
	flushes := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.Flushes > 0 })
	reads := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.ReadsPerSec > 0 })
	budget := slices.ContainsFunc(fr, func(r bench.Row) bool { return r.BudgetPeak > 0 })
	disk := slices.ContainsFunc(fr, func(r bench.Row) bool { return len(r.DiskBytesPerUserByte) > 0 })
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "WORKLOAD\tIMPL\tOP\tTIME/OP\tMIN-MAX\tCPU/OP\tALLOCS/OP\tKVBUF SPEEDUP"
	if disk {
		head += "\tDISK/USER B"
	}
	if mem {
		head += "\tBYTES/ENTRY"
	}
	if flushes {
		head += "\tSYNCS/FLUSH\tP50 FLUSH\tP99 FLUSH\tP999 FLUSH\tVIOLATIONS"
	}
	if reads {
		head += "\tREADS/S\tWRITES/S\tP50 READ\tP99 READ\tP99 READ@FLUSH\tP99 WRITE"
	}
	if budget {
		head += "\tENGINE PUTS/MEAN\tENGINE LAT/MEAN\tPEAK/BUDGET\tGEN/BUDGET\tOVER/GEN"
	}
	fmt.Fprintln(tw, head+"\tNOTE")
	for _, r := range fr {
		speed := "-"
		if own, ok := ref[r.Workload]; ok && !bench.IsOwn(r.Impl) {
			speed = speedupText(own, r.Impl)
		}
		impl := r.Impl
		if r.Floor {
			impl += " (floor)"
		}
		noisy := ""
		if r.Noisy {
			noisy = " *"
		}
		cpu := "-"
		if len(r.CPUNsPerOp) > 0 {
			cpu = bench.FormatNs(r.CPUPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s-%s%s\t%s\t%.3g\t%s", r.Workload, impl, r.Unit, bench.FormatNs(r.Median), bench.FormatNs(r.Min), bench.FormatNs(r.Max), noisy, cpu, r.AllocsPerOp, speed)
		if disk {
			d := "-"
			if len(r.DiskBytesPerUserByte) > 0 && r.DiskPerUserByte >= 0 {
				d = fmt.Sprintf("%.3g (%.3g-%.3g)", r.DiskPerUserByte, slices.Min(r.DiskBytesPerUserByte), slices.Max(r.DiskBytesPerUserByte))
			}
			fmt.Fprintf(tw, "\t%s", d)
		}
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
				fmt.Fprintf(tw, "\t%.3f\t%s\t%s\t%s\t%d", r.SyncsPerFlush(), bench.FormatNs(r.P50FlushNs), bench.FormatNs(r.P99FlushNs), bench.FormatNs(r.P999FlushNs), r.Violations)
			} else {
				fmt.Fprint(tw, "\t\t\t\t\t")
			}
		}
		if reads {
			if r.ReadsPerSec > 0 {
				inFlush := "-" // no read was sampled while a flush ran
				if r.P99ReadFlushNs > 0 {
					inFlush = bench.FormatNs(r.P99ReadFlushNs)
				}
				fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\t%s", fmtRate(r.ReadsPerSec), fmtRate(r.WritesPerSec),
					bench.FormatNs(r.P50ReadNs), bench.FormatNs(r.P99ReadNs), inFlush, bench.FormatNs(r.P99WriteNs))
			} else {
				fmt.Fprint(tw, "\t\t\t\t\t\t")
			}
		}
		if budget {
			if r.BudgetPeak > 0 {
				fmt.Fprintf(tw, "\t%.2f-%.2f\t%.2f-%.2f\t%.4f\t%.4f\t%.2f", r.EngineMinShare, r.EngineMaxShare, r.EngineMinLat, r.EngineMaxLat, r.BudgetPeak, r.BudgetGen, r.BudgetOverGen)
			} else {
				fmt.Fprint(tw, "\t\t\t\t\t")
			}
		}
		fmt.Fprintf(tw, "\t%s\n", noteText(r))
	}
	tw.Flush()
}

// startCPUProfile starts writing a CPU profile to path; stop ends it and
// closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile %s: %w", path, err)
		}
		return nil
	}, nil
}
