package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvbuf/kvbuf/bench"
	"github.com/kvbuf/kvbuf/bench/ycsb"
	"github.com/magiconair/properties"
)

func ycsbHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: kvtool ycsb [flags]

Runs YCSB's core workloads against kvbuf and the engines a user would pick
instead, through the go-ycsb bindings of package bench/ycsb, in temporary
databases that are removed afterwards. Each engine is loaded once with
--records records (batches of 256, all --threads' largest count of threads);
then every workload runs at every thread count for --rounds rounds, each
round running every engine once in rotating order (round r starts with
engine r mod n). A run opens the engine, does --warmup operations
unmeasured (in at most --max-time/5), then --ops measured ones (in at most
--max-time), and closes it.
A run's clock stops when what it wrote is durable: its final sync and its
Close are timed (and the load until a final sync). Between the two, and
after the warm-up and the load, an untimed settle step flushes memtables to
tables and waits out every flush and compaction, so that a run is charged
for its own background work only.
For each engine it prints the median throughput over rounds, the min-max,
the kvbuf speedup (kvbuf's ops/s / this engine's in the same round: the
median over rounds and its min-max; above 1: kvbuf is faster), the CPU time
per operation (user+system, the whole process, through Close, the settle
step left out), DISK/USER B (the bytes the process wrote to disk per byte
of the keys and field values the operations wrote, through the settle step
and Close; Linux /proc/self/io; "-" for a read-only workload, for badger,
which cannot be waited out, or where nothing is counted) and, per
operation type, p50/p99/p999 latencies over all rounds. READ@FLUSH and
SCAN@FLUSH are the reads and scans that started or ended while the engine
was flushing (kvbuf: a generation in flight; pebble: a memtable flush); the
--markdown tables give a workload that reads only by scans (E) its scans'
p99s, marked "scan".

--durability runs the comparison in each mode, with its own load:
  window  the same loss window W (kvbuf.host_log_interval, else
          FlushInterval, else 1s): kvbuf flushes every FlushInterval and
          its writes go through a host log (an append-only file, one
          write per op, synced every W); pebble writes NoSync and syncs
          its WAL (LogData) every W, badger calls Sync every W; bbolt
          does not run
  acked   acknowledged after durable: kvbuf writes then Flushes, pebble
          and badger sync every write, bbolt commits; concurrent writers
          share syncs (group commit)
In both, pebble's and badger's memtables are kvbuf's MaxPendingBytes and
their block caches kvbuf's CacheSize plus its ReadTierBytes (-p overrides
any of them).

Workloads: a (50% read, 50% update, zipfian), b (95/5), c (read only),
d (95% read, 5% insert, latest), e (95% scans of up to 100, 5% insert),
f (50% read, 50% read-modify-write), or the path of a YCSB properties file.
Records are 10 fields of 100 bytes unless a file or -p says otherwise.

Engines (doc/workloads.md says what each promises in each mode):
  kvbuf   default Options unless -p kvbuf.*
  pebble  v2, opened as kvbuf's store (format, Bloom filters)
  badger  v4, default options
  bbolt   default options (fsync per commit), DB.Batch with several threads

-p key=value sets a property over every workload's: engine options
(kvbuf.max_pending_bytes, kvbuf.flush_interval, kvbuf.cache_size,
kvbuf.pool_bytes, kvbuf.pipeline_depth, kvbuf.ops, kvbuf.host_log,
kvbuf.host_log_interval, kvbuf.flush_writes, pebble.cache_size, pebble.memtable_size,
pebble.sync_writes, pebble.sync_interval, badger.block_cache_size,
badger.memtable_size, badger.num_memtables, badger.sync_writes,
badger.sync_interval, bbolt.nosync) or any core workload property
(requestdistribution, fieldlength, batch.size, ...); it wins over what a
durability mode sets.

--json writes one JSON object per engine row to stdout: workload, threads,
db, durability, records, rounds, ops_per_round, ops_per_sec,
ops_per_sec_min, ops_per_sec_max, ops_per_sec_rounds, cpu_ns_per_op,
disk_bytes_per_user_byte (over all rounds: disk bytes summed over user
bytes summed), disk_bytes_per_user_byte_min and _max (per round),
kvbuf_speedup, kvbuf_speedup_min, kvbuf_speedup_max (other engines),
store (kvbuf's store or pebble, summed over store_rounds rounds, each
from its first operation through its settle step: flushes, compactions,
ingests, compacted_bytes, written_bytes), ops (operation -> count,
p50_ns, p99_ns, p999_ns, max_ns). --markdown writes the tables of the
README and doc/workloads.md (one per durability mode) to a file. A
progress line is drawn on stderr when it is a terminal or with
--progress.

`)
	printFlags(w, fs, "dir", "seed")
}

// ycsbOpJSON is one operation type's latencies in --json.
type ycsbOpJSON struct {
	Count  int64 `json:"count"`
	P50Ns  int64 `json:"p50_ns"`
	P99Ns  int64 `json:"p99_ns"`
	P999Ns int64 `json:"p999_ns"`
	MaxNs  int64 `json:"max_ns"`
}

// ycsbStoreJSON is a row's store work in --json (ycsb.StoreWork).
type ycsbStoreJSON struct {
	Flushes        int64 `json:"flushes"`
	Compactions    int64 `json:"compactions"`
	Ingests        int64 `json:"ingests"`
	CompactedBytes int64 `json:"compacted_bytes"`
	WrittenBytes   int64 `json:"written_bytes"`
}

// ycsbRowJSON is one --json line.
type ycsbRowJSON struct {
	Workload        string                `json:"workload"`
	Threads         int                   `json:"threads"`
	DB              string                `json:"db"`
	Durability      string                `json:"durability"`
	Records         int64                 `json:"records"`
	Rounds          int                   `json:"rounds"`
	OpsPerRound     int64                 `json:"ops_per_round"`
	OpsPerSec       float64               `json:"ops_per_sec"`
	OpsPerSecMin    float64               `json:"ops_per_sec_min"`
	OpsPerSecMax    float64               `json:"ops_per_sec_max"`
	OpsPerSecRounds []float64             `json:"ops_per_sec_rounds"`
	CPUNsPerOp      int64                 `json:"cpu_ns_per_op,omitempty"`
	DiskPerUserByte float64               `json:"disk_bytes_per_user_byte,omitempty"`
	DiskMin         float64               `json:"disk_bytes_per_user_byte_min,omitempty"`
	DiskMax         float64               `json:"disk_bytes_per_user_byte_max,omitempty"`
	KvbufSpeedup    float64               `json:"kvbuf_speedup,omitempty"`
	SpeedupMin      float64               `json:"kvbuf_speedup_min,omitempty"`
	SpeedupMax      float64               `json:"kvbuf_speedup_max,omitempty"`
	Store           *ycsbStoreJSON        `json:"store,omitempty"`
	StoreRounds     int                   `json:"store_rounds,omitempty"`
	Ops             map[string]ycsbOpJSON `json:"ops"`
}

func ycsbRowToJSON(r ycsb.Row) ycsbRowJSON {
	j := ycsbRowJSON{
		Workload: r.Workload, Threads: r.Threads, DB: r.Engine, Durability: r.Durability, Records: r.Records,
		Rounds: r.Rounds, OpsPerRound: r.OpsPerRound,
		OpsPerSec: r.OpsPerSec, OpsPerSecMin: r.MinOpsPerSec, OpsPerSecMax: r.MaxOpsPerSec, OpsPerSecRounds: r.RoundOpsPerSec,
		CPUNsPerOp: int64(r.CPUPerOp), DiskPerUserByte: r.DiskPerUserByte, DiskMin: r.DiskMin, DiskMax: r.DiskMax, KvbufSpeedup: r.KvbufSpeedup, SpeedupMin: r.SpeedupMin, SpeedupMax: r.SpeedupMax,
		Ops: map[string]ycsbOpJSON{},
	}
	if r.StoreRounds > 0 {
		s := r.Store
		j.Store = &ycsbStoreJSON{s.Flushes, s.Compactions, s.Ingests, s.CompactedBytes, s.WrittenBytes}
		j.StoreRounds = r.StoreRounds
	}
	for op, s := range r.Ops {
		j.Ops[op] = ycsbOpJSON{Count: s.Count, P50Ns: int64(s.P50), P99Ns: int64(s.P99), P999Ns: int64(s.P999), MaxNs: int64(s.Max)}
	}
	return j
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// propFlag collects -p key=value.
type propFlag struct{ p *properties.Properties }

func (f *propFlag) String() string { return "" }

func (f *propFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if f.p == nil {
		f.p = properties.NewProperties()
	}
	f.p.MustSet(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

// runYCSB implements "kvtool ycsb".
func runYCSB(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ycsb", flag.ContinueOnError)
	workloads := fs.String("workload", strings.Join(ycsb.StandardOrder, ","), "comma-separated `workloads`: a-f or properties files")
	dbs := fs.String("db", strings.Join(ycsb.Engines, ","), "comma-separated `engines` to compare")
	durability := fs.String("durability", strings.Join(ycsb.DurabilityModes, ","), "comma-separated durability `modes`: window (the same loss window), acked (acknowledged after durable)")
	threads := fs.String("threads", "1", "comma-separated client thread `counts`")
	records := fs.Int64("records", 1_000_000, "records to load")
	ops := fs.Int64("ops", 1_000_000, "measured operations per run")
	warmup := fs.Int64("warmup", 0, "unmeasured operations at the start of each run (default ops/10; -1 none)")
	rounds := fs.Int("rounds", 3, "rounds of each workload and thread count")
	maxTime := fs.Duration("max-time", 30*time.Second, "cap on each measured run (0: none)")
	quick := fs.Bool("quick", false, "smoke run in seconds: 2000 records, 2000 ops, 1 round, max 1s per run")
	asJSON := fs.Bool("json", false, "write one JSON object per engine row to stdout instead of the table")
	markdown := fs.String("markdown", "", "also write the results as a Markdown table to `file`")
	force := fs.Bool("progress", false, "draw the progress line even when stderr is not a terminal")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole run (loads, warm-ups and every engine's runs) to `file`, for go tool pprof")
	var props propFlag
	fs.Var(&props, "p", "set a workload or engine `key=value` property (repeatable)")
	// Hidden: for tests and experiments.
	dir := fs.String("dir", "", "parent directory of the temporary databases (default $TMPDIR)")
	seed := fs.Int64("seed", 1, "random seed")
	pos, code, done := parseFlags(fs, args, func(w io.Writer) { ycsbHelp(w, fs) }, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "ycsb", fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := ycsb.Config{
		Engines: splitList(*dbs), Workloads: splitList(*workloads),
		Records: *records, Ops: *ops, Warmup: *warmup, Rounds: *rounds, MaxTime: *maxTime,
		Dir: *dir, Seed: *seed, Props: props.p, Durability: splitList(*durability),
	}
	if *quick {
		// Explicit flags win over --quick's sizes.
		if !set["records"] {
			cfg.Records = 2000
		}
		if !set["ops"] {
			cfg.Ops = 2000
		}
		if !set["rounds"] {
			cfg.Rounds = 1
		}
		if !set["max-time"] {
			cfg.MaxTime = time.Second
		}
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = cfg.Ops / 10
	}
	for _, t := range splitList(*threads) {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 || n > 1024 {
			return usageError(stderr, "ycsb", fmt.Sprintf("--threads %q: want a comma-separated list of counts from 1 to 1024", *threads))
		}
		if !slices.Contains(cfg.Threads, n) {
			cfg.Threads = append(cfg.Threads, n)
		}
	}
	switch {
	case len(cfg.Threads) == 0:
		return usageError(stderr, "ycsb", "--threads: want at least one count")
	case len(cfg.Engines) == 0:
		return usageError(stderr, "ycsb", "--db: want at least one engine")
	case len(cfg.Workloads) == 0:
		return usageError(stderr, "ycsb", "--workload: want at least one workload")
	case len(cfg.Durability) == 0:
		return usageError(stderr, "ycsb", "--durability: want at least one mode")
	case cfg.Records < 1:
		return usageError(stderr, "ycsb", fmt.Sprintf("--records %d: want at least 1", cfg.Records))
	case cfg.Ops < 1:
		return usageError(stderr, "ycsb", fmt.Sprintf("--ops %d: want at least 1", cfg.Ops))
	case cfg.Rounds < 1:
		return usageError(stderr, "ycsb", fmt.Sprintf("--rounds %d: want at least 1", cfg.Rounds))
	case cfg.MaxTime < 0:
		return usageError(stderr, "ycsb", fmt.Sprintf("--max-time %v: want 0 (none) or more", cfg.MaxTime))
	}
	for _, e := range cfg.Engines {
		if !slices.Contains(ycsb.Engines, e) {
			return usageError(stderr, "ycsb", fmt.Sprintf("--db: unknown engine %q (want some of %s)", e, strings.Join(ycsb.Engines, ",")))
		}
	}
	for _, d := range cfg.Durability {
		if !slices.Contains(ycsb.DurabilityModes, d) {
			return usageError(stderr, "ycsb", fmt.Sprintf("--durability: unknown mode %q (want some of %s)", d, strings.Join(ycsb.DurabilityModes, ",")))
		}
	}
	if *cpuProf != "" {
		stop, err := startCPUProfile(*cpuProf)
		if err != nil {
			return fail(stderr, "ycsb", err)
		}
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(stderr, "kvtool ycsb: %s\n", errText(err))
			}
		}()
	}
	p := newProgress(stderr, *force, 1)
	last := 0.0
	cfg.Progress = func(frac float64, label string) {
		p.add(frac-last, label)
		last = frac
	}
	var encErr error
	if *asJSON {
		// Each group of rows as soon as it is done: a long run streams.
		// Bench never calls this and the progress callback at once.
		enc := json.NewEncoder(stdout)
		cfg.OnRows = func(rows []ycsb.Row) {
			p.finish()
			for _, r := range rows {
				if err := enc.Encode(ycsbRowToJSON(r)); err != nil && encErr == nil {
					encErr = err
				}
			}
		}
	}
	rows, err := ycsb.Bench(ctx, cfg)
	p.finish()
	if err == nil {
		err = encErr
	}
	if err != nil {
		if errors.Is(err, ycsb.ErrBadProperty) {
			return usageError(stderr, "ycsb", err.Error())
		}
		return fail(stderr, "ycsb", err)
	}
	if !*asJSON {
		printYCSBTable(stdout, rows, cfg)
	}
	if *markdown != "" {
		if err := os.WriteFile(*markdown, []byte(ycsbMarkdown(rows, cfg)), 0o644); err != nil {
			return fail(stderr, "ycsb", err)
		}
	}
	return exitOK
}

func ycsbHeader(cfg ycsb.Config) string {
	limit := "no time cap"
	if cfg.MaxTime > 0 {
		limit = fmt.Sprintf("at most %v per run", cfg.MaxTime)
	}
	modes := cfg.Durability
	if len(modes) == 0 {
		modes = ycsb.DurabilityModes
	}
	return fmt.Sprintf("%d records, %d ops per run after %d warm-up ops, %s (each timed through Close), %d rounds, durability %s, GOMAXPROCS %d, %s %s/%s",
		cfg.Records, cfg.Ops, max(cfg.Warmup, 0), limit, cfg.Rounds, strings.Join(modes, ","), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// ycsbOpOrder is the order operation rows are printed in.
var ycsbOpOrder = []string{ycsb.OpRead, ycsb.OpReadInFlush, ycsb.OpUpdate, ycsb.OpInsert, ycsb.OpScan, ycsb.OpScanInFlush, ycsb.OpReadModifyWrite,
	ycsb.OpBatchRead, ycsb.OpBatchUpdate, ycsb.OpBatchInsert}

func sortedOps(m map[string]ycsb.OpStats) []string {
	var out []string
	for _, op := range ycsbOpOrder {
		if _, ok := m[op]; ok {
			out = append(out, op)
		}
	}
	for op := range m {
		if !slices.Contains(out, op) {
			out = append(out, op)
		}
	}
	return out
}

func printYCSBTable(w io.Writer, rows []ycsb.Row, cfg ycsb.Config) {
	fmt.Fprintf(w, "kvtool ycsb: %s\n\n", ycsbHeader(cfg))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DURABILITY\tWORKLOAD\tTHREADS\tDB\tOPS/S\tMIN-MAX\tCPU/OP\tDISK/USER B\tKVBUF SPEEDUP\tOP\tCOUNT\tP50\tP99\tP999")
	for _, r := range rows {
		speed := "-"
		if r.KvbufSpeedup > 0 {
			speed = fmt.Sprintf("%.2fx (%.2f-%.2f)", r.KvbufSpeedup, r.SpeedupMin, r.SpeedupMax)
		}
		cpu := "-"
		if r.CPUPerOp > 0 {
			cpu = bench.FormatNs(float64(r.CPUPerOp))
		}
		for i, op := range sortedOps(r.Ops) {
			s := r.Ops[op]
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s-%s\t%s\t%s\t%s", r.Durability, r.Workload, r.Threads, r.Engine, fmtRate(r.OpsPerSec), fmtRate(r.MinOpsPerSec), fmtRate(r.MaxOpsPerSec), cpu, diskText(r), speed)
			} else {
				fmt.Fprint(tw, "\t\t\t\t\t\t\t\t")
			}
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t%s\n", op, s.Count, bench.FormatNs(float64(s.P50)), bench.FormatNs(float64(s.P99)), bench.FormatNs(float64(s.P999)))
		}
	}
	tw.Flush()
	fmt.Fprint(w, `
KVBUF SPEEDUP = kvbuf's ops/s / this engine's, per round: median (min-max); above 1: kvbuf is faster. Latencies over all rounds.
Every run is timed through Close (its writes durable); load: one round, records/s through BatchInsert, until synced.
READ@FLUSH, SCAN@FLUSH: reads and scans while the engine was flushing (kvbuf, pebble). DURABILITY: kvtool ycsb -h.
DISK/USER B: bytes written to disk by the process per byte of keys and field values written, through the settle step (flushes and compactions waited out, untimed) and Close, over all rounds (their disk bytes summed over their user bytes summed), then the per-round min-max; "-" for badger, which cannot be waited out, where a settle step found an engine still busy at its deadline, or where the figure is negative.
`)
}

// diskText formats a row's disk bytes per user byte over all rounds with
// the per-round min-max, or "-" (nothing written, not counted, or
// negative).
func diskText(r ycsb.Row) string {
	if r.DiskPerUserByte <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g (%.3g-%.3g)", r.DiskPerUserByte, r.DiskMin, r.DiskMax)
}

// ycsbMarkdown renders rows as the README tables, one per durability mode:
// throughput per engine, kvbuf's speedups per round (median and min–max),
// and each engine's read p99, overall and during its flushes (its scans'
// for a workload whose reads are all scans).
func ycsbMarkdown(rows []ycsb.Row, cfg ycsb.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- kvtool ycsb: %s -->\n", ycsbHeader(cfg))
	var modes []string
	for _, r := range rows {
		if !slices.Contains(modes, r.Durability) {
			modes = append(modes, r.Durability)
		}
	}
	for mi, mode := range modes {
		var engines []string
		type key struct {
			w string
			t int
		}
		var order []key
		by := map[key]map[string]ycsb.Row{}
		for _, r := range rows {
			if r.Durability != mode {
				continue
			}
			if !slices.Contains(engines, r.Engine) {
				engines = append(engines, r.Engine)
			}
			k := key{r.Workload, r.Threads}
			if by[k] == nil {
				by[k] = map[string]ycsb.Row{}
				order = append(order, k)
			}
			by[k][r.Engine] = r
		}
		if mi > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Durability `%s`:\n\n", mode)
		hasKvbuf := slices.Contains(engines, "kvbuf")
		head := "| workload | threads |"
		sep := "| --- | --: |"
		for _, e := range engines {
			head += " " + e + " ops/s |"
			sep += " --: |"
		}
		for _, e := range engines {
			if e != "kvbuf" && hasKvbuf {
				head += " kvbuf ÷ " + e + " |"
				sep += " --: |"
			}
		}
		head += " CPU/op " + strings.Join(engines, " / ") + " | disk B per user B " + strings.Join(engines, " / ") + " | read p99 " + strings.Join(engines, " / ") + " | read p99 in flushes " + strings.Join(engines, " / ") + " |"
		sep += " --: | --: | --: | --: |"
		fmt.Fprintf(&b, "%s\n%s\n", head, sep)
		p99 := func(r ycsb.Row, op string) string {
			s, ok := r.Ops[op]
			if !ok || s.Count == 0 {
				return "–"
			}
			return bench.FormatNs(float64(s.P99))
		}
		for _, k := range order {
			name := strings.ToUpper(k.w)
			if len(k.w) > 1 {
				name = k.w
			}
			line := fmt.Sprintf("| %s | %d |", name, k.t)
			for _, e := range engines {
				line += " " + fmtRate(by[k][e].OpsPerSec) + " |"
			}
			for _, e := range engines {
				if e != "kvbuf" && hasKvbuf {
					r := by[k][e]
					line += fmt.Sprintf(" %.2f× (%.2f–%.2f) |", r.KvbufSpeedup, r.SpeedupMin, r.SpeedupMax)
				}
			}
			var cpu, disk, read, flush []string
			for _, e := range engines {
				r := by[k][e]
				c := "–"
				if r.CPUPerOp > 0 {
					c = bench.FormatNs(float64(r.CPUPerOp))
				}
				cpu = append(cpu, c)
				d := "–"
				if r.DiskPerUserByte > 0 {
					d = diskText(r)
				}
				disk = append(disk, d)
				if _, reads := r.Ops[ycsb.OpRead]; !reads && r.Ops[ycsb.OpScan].Count > 0 {
					// A workload that reads by scans (E): its scans.
					read = append(read, "scan "+p99(r, ycsb.OpScan))
					flush = append(flush, "scan "+p99(r, ycsb.OpScanInFlush))
					continue
				}
				read = append(read, p99(r, ycsb.OpRead))
				flush = append(flush, p99(r, ycsb.OpReadInFlush))
			}
			line += " " + strings.Join(cpu, " / ") + " | " + strings.Join(disk, " / ") + " | " + strings.Join(read, " / ") + " | " + strings.Join(flush, " / ") + " |"
			fmt.Fprintln(&b, line)
		}
	}
	return b.String()
}
