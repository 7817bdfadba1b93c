package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/workload"
)

var (
	benchScale = flag.Float64("scale", 1, "scale of the workload sizes for the Benchmark functions (1 = doc/workloads.md)")
	benchDir   = flag.String("benchdir", "", "parent directory of the Benchmark functions' engines (default $TMPDIR)")
	// go test repeats each sub-benchmark -count times in a row, so the
	// implementations of a workload cannot interleave within one run;
	// scripts/bench-all.sh runs the package several times with -rotate
	// 0, 1, 2, … instead, so that the k-th run orders them as round k of
	// kvtool bench does (RoundOrder).
	benchRotate = flag.Int("rotate", 0, "run each workload's sub-benchmarks in the order of round rotate (RoundOrder)")
)

// Suites opened by the Benchmark functions, kept for the whole process and
// closed by TestMain.
var (
	suiteMu    sync.Mutex
	suiteCache = map[string]*Suite{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	suiteMu.Lock()
	for _, s := range suiteCache {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	suiteMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestMedian(t *testing.T) {
	cases := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range cases {
		in := slices.Clone(tc.in)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Median modified its input: %v", in)
		}
	}
}

// recLooper records the order in which rounds start and counts i%2.
type recLooper struct {
	name  string
	order *[]string
	mu    *sync.Mutex
	seen  *[]int
}

func (l recLooper) Loop(g, lo, hi int) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo == 0 {
		*l.order = append(*l.order, l.name)
	}
	var n int64
	for i := lo; i < hi; i++ {
		n += int64(i % 2)
		if l.seen != nil {
			*l.seen = append(*l.seen, i)
		}
	}
	return n, nil
}

func TestRunRotatesOrder(t *testing.T) {
	var order []string
	var mu sync.Mutex
	mk := func(name string) Impl { return Impl{Name: name, Loop: recLooper{name, &order, &mu, nil}} }
	w := &Workload{Name: "T/rotate", Ops: 4, Impls: []Impl{mk("kvbuf"), mk("b"), mk("c")}}
	var steps []string
	rows, err := w.Run(context.Background(), 4, 1, func(impl string, round int) { steps = append(steps, fmt.Sprint(impl, round)) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kvbuf", "b", "c", // warm-up, in order
		"kvbuf", "b", "c", "b", "c", "kvbuf", "c", "kvbuf", "b", "c", "b", "kvbuf"} // RoundOrder(3, 0..3)
	if !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
	if len(steps) != 15 || steps[0] != "kvbuf-1" || steps[3] != "kvbuf0" || steps[14] != "kvbuf3" {
		t.Errorf("progress steps %v", steps)
	}
	if len(rows) != 3 || rows[0].Impl != "kvbuf" || rows[2].Impl != "c" {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.Rounds != 4 || len(r.NsPerOp) != 4 || r.OpsPerRound != 4 || r.Goroutines != 1 {
			t.Errorf("%s: rounds %d, samples %d, ops %d, goroutines %d", r.Impl, r.Rounds, len(r.NsPerOp), r.OpsPerRound, r.Goroutines)
		}
		if r.Min > r.Median || r.Median > r.Max {
			t.Errorf("%s: min %v median %v max %v out of order", r.Impl, r.Min, r.Median, r.Max)
		}
	}
	if len(rows[0].RatioVs) != 2 || rows[1].RatioVs != nil {
		t.Errorf("ratios: kvbuf %v, b %v", rows[0].RatioVs, rows[1].RatioVs)
	}
}

func TestRunParallel(t *testing.T) {
	var order []string
	var seen []int
	var mu sync.Mutex
	w := &Workload{Name: "T/par", Ops: 1001, Parallel: true, Impls: []Impl{
		{Name: "kvbuf", Loop: recLooper{"kvbuf", &order, &mu, &seen}},
	}}
	rows, err := w.Run(context.Background(), 1, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Workload != "T/par-cpu3" || rows[0].Goroutines != 3 {
		t.Errorf("row %s at %d goroutines", rows[0].Workload, rows[0].Goroutines)
	}
	slices.Sort(seen)
	for i, v := range seen {
		if v != i/2 || len(seen) != 2002 { // each operation once per round: warm-up and round 0
			t.Fatalf("operations run: %d of them, %v...", len(seen), seen[:min(len(seen), 10)])
		}
	}
	if w.NameAt(1) != "T/par" || (&Workload{Name: "x"}).NameAt(4) != "x" {
		t.Error("NameAt")
	}
	if IsOwn("kvbufx") || !IsOwn("kvbuf-getmany") || IsOwn("raw") {
		t.Error("IsOwn")
	}
}

// sumLooper returns the same check for every operation.
type sumLooper int64

func (c sumLooper) Loop(_, lo, hi int) (int64, error) { return int64(c) * int64(hi-lo), nil }

type errLooper struct{ err error }

func (e errLooper) Loop(int, int, int) (int64, error) { return 0, e.err }

func TestRunDetectsMismatch(t *testing.T) {
	w := &Workload{Name: "T/mismatch", Ops: 3, Impls: []Impl{
		{Name: "kvbuf", Loop: sumLooper(1)},
		{Name: "floor", Floor: true, Loop: sumLooper(0)}, // floors are not compared
		{Name: "wrong", Loop: sumLooper(2)},
	}}
	_, err := w.Run(context.Background(), 1, 1, nil)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "wrong counted 6") {
		t.Fatalf("err = %v, want ErrMismatch naming the wrong row", err)
	}
	w.NoCheck = true
	if _, err := w.Run(context.Background(), 1, 1, nil); err != nil {
		t.Fatalf("NoCheck workload compared: %v", err)
	}
	w.NoCheck = false
	w.Impls = w.Impls[:2]
	if _, err := w.Run(context.Background(), 1, 1, nil); err != nil {
		t.Fatalf("floor row compared: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	boom := errors.New("boom")
	ctx := context.Background()
	w := &Workload{Name: "T/err", Ops: 2, Impls: []Impl{{Name: "kvbuf", Loop: errLooper{boom}}}}
	if _, err := w.Run(ctx, 1, 1, nil); !errors.Is(err, boom) {
		t.Errorf("op error: %v", err)
	}
	if _, err := w.Run(ctx, 0, 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("0 rounds: %v", err)
	}
	if _, err := (&Workload{Name: "T/empty"}).Run(ctx, 1, 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no impls: %v", err)
	}
	if _, err := (&Workload{Name: "T/none", Impls: []Impl{{Name: "x"}}}).Run(ctx, 1, 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("impl without Loop or Round: %v", err)
	}
	both := Impl{Name: "x", Loop: sumLooper(1), Round: RoundFunc(func(context.Context, int) (RoundResult, error) { return RoundResult{}, nil })}
	if _, err := (&Workload{Name: "T/both", Impls: []Impl{both}}).Run(ctx, 1, 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("impl with Loop and Round: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ok := &Workload{Name: "T/ok", Ops: 1, Impls: []Impl{{Name: "kvbuf", Loop: sumLooper(0)}}}
	if _, err := ok.Run(cctx, 1, 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
	prep := &Workload{Name: "T/prep", Ops: 1, Impls: ok.Impls, prepare: func(context.Context) error { return boom }}
	if _, err := prep.Run(ctx, 1, 1, nil); !errors.Is(err, boom) {
		t.Errorf("prepare error: %v", err)
	}
}

func TestOpenBadConfig(t *testing.T) {
	ctx := context.Background()
	for _, c := range []*Config{{Scale: -1}, {Scale: 1000}, {FlushesPerGoroutine: -1}, {Scans: -2}, {WriteRate: -1}} {
		if s, err := Open(ctx, "W4", c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Open(%+v) = %v, want ErrBadConfig", c, err)
			if s != nil {
				s.Close()
			}
		}
	}
	if _, err := Open(ctx, "W9", nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown suite: %v", err)
	}
	if _, err := Open(ctx, "W1", &Config{Dir: "/nonexistent/dir/for/kvbuf"}); err == nil {
		t.Error("Open under a missing directory succeeded")
	}
}

// TestSuites runs every workload of every suite at a tiny scale: the
// answers of all implementations must agree (Run checks), names must be
// canonical, the flush rows must behave as documented.
func TestSuites(t *testing.T) {
	ctx := context.Background()
	for _, info := range Catalog() {
		t.Run(info.Name, func(t *testing.T) {
			s, err := Open(ctx, info.Name, &Config{Dir: t.TempDir(), Scale: 0.0005, FlushesPerGoroutine: 2, Scans: 2, ReadBack: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
				if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("suite dir %s left behind: %v", s.Dir(), err)
				}
			}()
			var names, parallel []string
			for _, w := range s.Workloads {
				names = append(names, w.Name)
				if w.Parallel {
					parallel = append(parallel, w.Name)
				}
				gs := []int{1}
				if w.Parallel {
					gs = []int{1, 2}
				}
				for _, g := range gs {
					rows, err := w.Run(ctx, 1, g, nil)
					if err != nil {
						t.Fatal(err)
					}
					checkRows(t, w, rows)
				}
			}
			if !slices.Equal(names, info.Workloads) || !slices.Equal(parallel, info.Parallel) {
				t.Errorf("workloads %v (parallel %v), catalog says %v (%v)", names, parallel, info.Workloads, info.Parallel)
			}
		})
	}
}

func checkRows(t *testing.T, w *Workload, rows []Row) {
	t.Helper()
	own := 0
	for _, r := range rows {
		if IsOwn(r.Impl) {
			own++
		}
	}
	if !IsOwn(rows[0].Impl) || len(rows[0].RatioVs) != len(rows)-own {
		t.Errorf("%s: first row %s with ratios %v", w.Name, rows[0].Impl, rows[0].RatioVs)
	}
	// Disk figures: on every round of every row of a workload with user
	// bytes, or (a system or file system without the count) on none.
	counted := slices.ContainsFunc(rows, func(r Row) bool { return len(r.DiskBytesPerUserByte) > 0 })
	for _, r := range rows {
		if (w.UserBytesPerOp == 0 || !counted) && r.DiskBytesPerUserByte != nil ||
			w.UserBytesPerOp > 0 && counted && (len(r.DiskBytesPerUserByte) != r.Rounds || r.DiskPerUserByte < 0) {
			t.Errorf("%s/%s: disk bytes per user byte %v over %d rounds (user bytes per op %v)", r.Workload, r.Impl, r.DiskBytesPerUserByte, r.Rounds, w.UserBytesPerOp)
		}
	}
	for _, r := range rows {
		if r.Median <= 0 || r.OpsPerRound <= 0 || r.Unit == "" {
			t.Errorf("%s/%s: median %v, ops %d, unit %q", r.Workload, r.Impl, r.Median, r.OpsPerRound, r.Unit)
		}
		switch {
		case strings.HasPrefix(w.Name, "W2/get-") && !strings.Contains(w.Name, "snapshot"):
			// Measured or not, not its sign: at this test's tiny scale
			// the live-heap difference is noise-dominated (pebble's and
			// the runtime's own allocations move it by more than the
			// entries hold), and was seen negative one run in five.
			wantMem := r.Impl != ImplPebbleGet && r.Impl != ImplKvbufDefault
			if (r.BytesPerEntry != 0) != wantMem {
				t.Errorf("%s/%s: %v bytes per entry", r.Workload, r.Impl, r.BytesPerEntry)
			}
			if wantMem && IsOwn(r.Impl) && r.AccountedBytesPerEntry <= 0 {
				t.Errorf("%s/%s: accounted bytes per entry %v", r.Workload, r.Impl, r.AccountedBytesPerEntry)
			}
		case w.Name == "W2/gc-1m":
			if r.BytesPerEntry == 0 || (r.Impl == ImplKvbuf) != (r.AccountedBytesPerEntry > 0) {
				t.Errorf("%s/%s: %v bytes per entry, %v accounted", r.Workload, r.Impl, r.BytesPerEntry, r.AccountedBytesPerEntry)
			}
		case w.Name == "W3/construct":
			if r.BytesPerEntry <= 0 {
				t.Errorf("%s/%s: %v bytes per instance", r.Workload, r.Impl, r.BytesPerEntry)
			}
		case strings.HasPrefix(w.Name, "W4/"):
			if r.Flushes != int64(r.OpsPerRound) || r.P99FlushNs < r.P50FlushNs || r.P999FlushNs < r.P99FlushNs || r.P50FlushNs <= 0 {
				t.Errorf("%s/%s: flushes %d ops %d p50 %v p99 %v p999 %v", r.Workload, r.Impl, r.Flushes, r.OpsPerRound, r.P50FlushNs, r.P99FlushNs, r.P999FlushNs)
			}
			switch r.Impl {
			case ImplKvbuf, ImplGroupCommit:
				if r.Violations != 0 || r.SyncsPerFlush() > 1 || r.Syncs == 0 {
					t.Errorf("%s/%s: %d violations, %d syncs for %d flushes", r.Workload, r.Impl, r.Violations, r.Syncs, r.Flushes)
				}
			case ImplPerCallerSync:
				if r.Violations != 0 || r.Syncs != r.Flushes {
					t.Errorf("%s/per-caller-sync: %d violations, %d syncs for %d flushes", r.Workload, r.Violations, r.Syncs, r.Flushes)
				}
			}
		case strings.HasPrefix(w.Name, "W7/"):
			if r.ReadsPerSec <= 0 || r.P50ReadNs <= 0 || r.P99ReadNs < r.P50ReadNs {
				t.Errorf("%s/%s: %v reads/s, p50 %v p99 %v", r.Workload, r.Impl, r.ReadsPerSec, r.P50ReadNs, r.P99ReadNs)
			}
		}
		if _, ok := processCPU(); ok && (len(r.CPUNsPerOp) != r.Rounds || r.CPUPerOp < 0) {
			t.Errorf("%s/%s: CPU per op %v over %d rounds", r.Workload, r.Impl, r.CPUNsPerOp, r.Rounds)
		}
		if w.Writes && !r.Floor && r.ReadBack <= 0 {
			t.Errorf("%s/%s: a write row read back %d values", r.Workload, r.Impl, r.ReadBack)
		}
		wantLabel := ""
		switch {
		case w.Name == "W8/batch-64-puts":
			wantLabel = LabelWriteOnly
		case r.Impl == ImplSingleflight:
			wantLabel = LabelBreaksDurability
		case strings.HasPrefix(w.Name, "W6/") && (r.Impl == ImplKvbufFlushOnly || r.Impl == ImplPebbleSortedSync || r.Impl == ImplApplyWords || r.Impl == ImplPwriteWords):
			wantLabel = LabelComponent
		}
		if r.Label != wantLabel {
			t.Errorf("%s/%s: label %q, want %q", r.Workload, r.Impl, r.Label, wantLabel)
		}
		if r.Noisy != (r.Max > NoisyRatio*r.Min) {
			t.Errorf("%s/%s: noisy %t with min %v max %v", r.Workload, r.Impl, r.Noisy, r.Min, r.Max)
		}
	}
}

// cachedSuite returns the suite called name, set up once and kept while
// the Benchmark functions of that suite run (go test -count runs each
// Benchmark function that many times in a row). Other suites are closed
// first, so that the garbage collections W2/gc-1m times, and every other
// row, do not pay for another suite's heap.
func cachedSuite(b *testing.B, name string) *Suite {
	suiteMu.Lock()
	defer suiteMu.Unlock()
	if s := suiteCache[name]; s != nil {
		return s
	}
	for other, s := range suiteCache {
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		delete(suiteCache, other)
	}
	s, err := Open(context.Background(), name, &Config{Dir: *benchDir, Scale: *benchScale})
	if err != nil {
		b.Fatal(err)
	}
	suiteCache[name] = s
	return s
}

// loopChunk is how many operations of a Loop implementation one b.Loop
// iteration runs: the harness's one indirect call is spread over them.
const loopChunk = 1 << 14

// benchSuite runs the suite's workloads as sub-benchmarks named
// workload/impl (BenchmarkW1/lookup-with-pending-changes/kvbuf, …) over
// the same implementations kvtool bench times. A workload's
// implementations run in the order of round -rotate (RoundOrder; go test
// runs each sub-benchmark's -count and -cpu repetitions back to back, so
// interleaving needs several runs with different -rotate values: see
// scripts/bench-all.sh). Loop workloads run loopChunk operations per
// b.Loop iteration, in
// GOMAXPROCS goroutines for the parallel ones (go test -cpu 1,2 gives rows
// at 1 and 2 goroutines); Round workloads run one round per iteration.
// ns/op, B/op and allocs/op are reported per operation of the workload
// (a lookup, a get, a flush of 1M changes, a write+flush, a put, a read).
func benchSuite(b *testing.B, name string) {
	ctx := context.Background()
	s := cachedSuite(b, name)
	call := max(*benchRotate, 0)
	for _, w := range s.Workloads {
		if err := w.Prepare(ctx); err != nil {
			b.Fatal(err)
		}
		sub := strings.TrimPrefix(w.Name, Family(w.Name)+"/")
		for _, k := range RoundOrder(len(w.Impls), call) {
			im := w.Impls[k]
			b.Run(sub+"/"+im.Name, func(b *testing.B) { benchImpl(b, w, im) })
		}
	}
}

// benchImpl runs one implementation under pprof labels workload and impl,
// so that one CPU profile of several sub-benchmarks can be split with
// go tool pprof -tagfocus 'workload=W2/get-miss' -tagfocus 'impl=kvbuf'.
func benchImpl(b *testing.B, w *Workload, im Impl) {
	pprof.Do(context.Background(), pprof.Labels("workload", w.Name, "impl", im.Name), func(ctx context.Context) {
		benchImplLabeled(ctx, b, w, im)
	})
}

func benchImplLabeled(ctx context.Context, b *testing.B, w *Workload, im Impl) {
	b.ReportAllocs() // replaced below by the per-operation figures
	g := 1
	if w.Parallel {
		g = runtime.GOMAXPROCS(0)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var ops int
	var timed time.Duration
	var tot RoundResult
	var reads, writes []float64
	var mem, acct []float64
	var mallocs, allocBytes uint64
	measured := false
	var cpu time.Duration
	cpuOK := false
	if im.Loop != nil {
		c0, ok0 := processCPU()
		defer func() { // after the loop: the CPU of every goroutine of the process
			if c1, ok1 := processCPU(); ok0 && ok1 {
				b.ReportMetric(float64((c1-c0).Nanoseconds())/float64(max(ops, 1)), "cpu-ns/op")
			}
		}()
		chunk := min(w.Ops, loopChunk)
		pos := 0
		for b.Loop() {
			hi := min(pos+chunk, w.Ops)
			if _, err := RunLoop(im.Loop, pos, hi, g); err != nil {
				b.Fatal(err)
			}
			ops += hi - pos
			if pos = hi; pos == w.Ops {
				pos = 0
			}
		}
		timed = b.Elapsed()
		if rb, ok := im.Loop.(ReadBacker); ok { // a Looper that writes checks what it wrote
			if _, err := rb.ReadBack(ctx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		for b.Loop() {
			if w.quiesce != nil {
				b.StopTimer()
				if err := w.quiesce(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			start := time.Now()
			r, err := im.Round.Round(ctx, g)
			if err != nil {
				b.Fatal(err)
			}
			if r.Elapsed <= 0 {
				r.Elapsed = time.Since(start)
			}
			ops += r.Ops
			timed += r.Elapsed
			tot.Flushes += r.Flushes
			tot.Syncs += r.Syncs
			tot.Violations += r.Violations
			tot.FlushLatencies = append(tot.FlushLatencies, r.FlushLatencies...)
			tot.ReadLatencies = append(tot.ReadLatencies, r.ReadLatencies...)
			tot.ReadFlushLatencies = append(tot.ReadFlushLatencies, r.ReadFlushLatencies...)
			tot.WriteLatencies = append(tot.WriteLatencies, r.WriteLatencies...)
			if r.Reads > 0 {
				reads = append(reads, float64(r.Reads)/r.Elapsed.Seconds())
				writes = append(writes, float64(r.Writes)/r.Elapsed.Seconds())
			}
			if r.BytesPerEntry != 0 {
				mem = append(mem, r.BytesPerEntry)
			}
			if r.AccountedBytes != 0 {
				acct = append(acct, r.AccountedBytes)
			}
			if r.MallocsMeasured {
				mallocs, allocBytes, measured = mallocs+r.Mallocs, allocBytes+r.AllocBytes, true
			}
			if r.CPUMeasured {
				cpu, cpuOK = cpu+r.CPU, true
			}
		}
	}
	runtime.ReadMemStats(&m1)
	ops = max(ops, 1)
	if !measured {
		mallocs, allocBytes = m1.Mallocs-m0.Mallocs, m1.TotalAlloc-m0.TotalAlloc
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(ops), "ns/op")
	b.ReportMetric(float64(mallocs)/float64(ops), "allocs/op")
	b.ReportMetric(float64(allocBytes)/float64(ops), "B/op")
	if cpuOK {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(ops), "cpu-ns/op")
	}
	if im.BytesPerEntry != 0 {
		b.ReportMetric(im.BytesPerEntry, "heap-B/entry")
	}
	if im.AccountedBytes != 0 {
		b.ReportMetric(im.AccountedBytes, "acct-B/entry")
	}
	if len(mem) > 0 {
		unit := "heap-B/entry"
		if w.Unit == "instance" {
			unit = "heap-B/instance"
		}
		b.ReportMetric(Median(mem), unit)
	}
	if len(acct) > 0 {
		b.ReportMetric(Median(acct), "acct-B/entry")
	}
	if tot.Flushes > 0 {
		b.ReportMetric(float64(tot.Syncs)/float64(tot.Flushes), "syncs/flush")
		b.ReportMetric(float64(tot.Violations), "violations")
		b.ReportMetric(workload.Percentile(tot.FlushLatencies, 0.5), "p50-flush-ns")
		b.ReportMetric(workload.Percentile(tot.FlushLatencies, 0.99), "p99-flush-ns")
		b.ReportMetric(workload.Percentile(tot.FlushLatencies, 0.999), "p999-flush-ns")
	}
	if len(reads) > 0 {
		b.ReportMetric(Median(reads), "reads/s")
		b.ReportMetric(Median(writes), "writes/s")
		b.ReportMetric(workload.Percentile(tot.ReadLatencies, 0.5), "p50-read-ns")
		b.ReportMetric(workload.Percentile(tot.ReadLatencies, 0.99), "p99-read-ns")
		b.ReportMetric(workload.Percentile(tot.ReadFlushLatencies, 0.99), "p99-read-in-flush-ns")
		b.ReportMetric(workload.Percentile(tot.WriteLatencies, 0.99), "p99-write-ns")
	}
}

// BenchmarkW1 is W1 (bitslice lookups), with the Count, Ones and
// open-snapshot rows. -scale shrinks it.
func BenchmarkW1(b *testing.B) { benchSuite(b, "W1") }

// BenchmarkW2 is W2 (key-value lookups over pebble), with the
// open-snapshot rows.
func BenchmarkW2(b *testing.B) { benchSuite(b, "W2") }

// BenchmarkW2Memory is W2/gc-1m: the time of a garbage collection with W2's
// pending entries held by each structure, and the live heap per entry.
// Run it on its own (-bench '^BenchmarkW2Memory$'): every suite still set
// up in the process is live heap the collections scan.
func BenchmarkW2Memory(b *testing.B) { benchSuite(b, "W2-memory") }

// BenchmarkW3 is W3 (contended table scenarios). Run it with -cpu 1,2.
func BenchmarkW3(b *testing.B) { benchSuite(b, "W3") }

// BenchmarkW4 is W4 (flush coalescing); one iteration is one round.
func BenchmarkW4(b *testing.B) { benchSuite(b, "W4") }

// BenchmarkW6 is W6 (flush throughput); one iteration is one round.
func BenchmarkW6(b *testing.B) { benchSuite(b, "W6") }

// BenchmarkW7 is W7 (reads under write load); one iteration is one round.
func BenchmarkW7(b *testing.B) { benchSuite(b, "W7") }

// BenchmarkW8 is W8 (batch writes) and the DeleteRange rows.
func BenchmarkW8(b *testing.B) { benchSuite(b, "W8") }

func TestFormatNsAndJSON(t *testing.T) {
	for ns, want := range map[float64]string{3.64: "3.64 ns", 1234: "1.23 µs", 2.5e6: "2.5 ms", 3e9: "3 s"} {
		if got := FormatNs(ns); got != want {
			t.Errorf("FormatNs(%v) = %q, want %q", ns, got, want)
		}
	}
	r := Row{Workload: "W4/flush-g1", Impl: "kvbuf", Median: 2, Min: 1, Max: 4, Noisy: true, Flushes: 10, Syncs: 5, Violations: 1}
	j := r.JSON()
	if j.NsPerOp != 2 || !j.Noisy || j.Flushes == nil || *j.SyncsPerFlush != 0.5 || *j.Violations != 1 || j.BytesPerEntry != nil || j.ReadsPerSec != nil {
		t.Errorf("JSON() = %+v", j)
	}
}

// TestRoundOrder checks the rotation's two promises for every size: in
// the first n rounds every implementation runs once at every position,
// and over a whole design (n rounds, or 2n for an odd n) every
// implementation runs right after every other one equally often.
func TestRoundOrder(t *testing.T) {
	for n := 1; n <= 12; n++ {
		m := n
		if n%2 == 1 {
			m = 2 * n
		}
		pos := make([][]int, n) // pos[impl][position] in the first n rounds
		for i := range pos {
			pos[i] = make([]int, n)
		}
		after := map[[2]int]int{}
		for r := range m {
			o := RoundOrder(n, r)
			seen := make([]bool, n)
			for j, k := range o {
				if k < 0 || k >= n || seen[k] {
					t.Fatalf("RoundOrder(%d, %d) = %v: not a permutation", n, r, o)
				}
				seen[k] = true
				if r < n {
					pos[k][j]++
				}
				if j > 0 {
					after[[2]int{o[j-1], k}]++
				}
			}
			if !slices.Equal(o, RoundOrder(n, r+m)) {
				t.Errorf("RoundOrder(%d, %d) differs from round %d", n, r+m, r)
			}
		}
		for k := range n {
			for j := range n {
				if pos[k][j] != 1 {
					t.Errorf("n=%d: implementation %d at position %d %d times in the first %d rounds", n, k, j, pos[k][j], n)
				}
			}
		}
		for a := range n {
			for b := range n {
				if a != b && after[[2]int{a, b}] != m/n {
					t.Errorf("n=%d: %d right after %d in %d of %d rounds, want %d", n, b, a, after[[2]int{a, b}], m, m/n)
				}
			}
		}
	}
	if RoundOrder(0, 3) != nil {
		t.Error("RoundOrder(0, …) not nil")
	}
}

// timesRounder reports per[k] as the time of its k-th round (the warm-up
// is k = 0), without taking it.
type timesRounder struct {
	per []time.Duration
	r   int
}

func (x *timesRounder) Round(context.Context, int) (RoundResult, error) {
	d := x.per[x.r%len(x.per)]
	x.r++
	return RoundResult{Ops: 1, Checks: 1, Elapsed: d}, nil
}

// TestRatiosPerRound: a ratio is computed within each round (both rows of
// a round share its load) and summarised with its spread; a round that
// slowed both rows leaves the ratio alone, while the rows' own medians
// and min–max move.
func TestRatiosPerRound(t *testing.T) {
	// Warm-up first, then rounds 0..3 (both rows run once per round).
	own := &timesRounder{per: []time.Duration{time.Second, 10, 20, 100, 10}}
	base := &timesRounder{per: []time.Duration{time.Second, 20, 40, 200, 30}}
	w := &Workload{Name: "T/ratio", Impls: []Impl{{Name: "kvbuf", Round: own}, {Name: "base", Round: base}}}
	rows, err := w.Run(context.Background(), 4, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ra := rows[0].Ratios["base"]
	if !slices.Equal(ra.PerRound, []float64{2, 2, 2, 3}) || ra.Median != 2 || ra.Min != 2 || ra.Max != 3 || ra.Noisy {
		t.Errorf("ratio %+v, want per round [2 2 2 3], median 2, min 2, max 3, not noisy", ra)
	}
	if rows[0].RatioVs["base"] != 2 || !rows[0].Noisy || !rows[1].Noisy {
		t.Errorf("RatioVs %v; rows noisy %t %t (their rounds differ tenfold)", rows[0].RatioVs, rows[0].Noisy, rows[1].Noisy)
	}
	own.per = []time.Duration{time.Second, 10, 10, 10, 10}
	base.per = []time.Duration{time.Second, 10, 20, 10, 10}
	rows, err = w.Run(context.Background(), 4, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ra := rows[0].Ratios["base"]; !ra.Noisy || ra.Min != 1 || ra.Max != 2 {
		t.Errorf("ratio %+v: want noisy (1 to 2)", ra)
	}
	j := rows[0].JSON()
	if j.RatioVsMin["base"] != 1 || j.RatioVsMax["base"] != 2 || !j.RatioVsNoisy["base"] {
		t.Errorf("JSON ratios: min %v max %v noisy %v", j.RatioVsMin, j.RatioVsMax, j.RatioVsNoisy)
	}
}

// TestCPUCountsOtherGoroutines: the CPU time of a timed part includes the
// work it hands to another goroutine, which the wall clock alone would
// not show as work.
func TestCPUCountsOtherGoroutines(t *testing.T) {
	if _, ok := processCPU(); !ok {
		t.Skip("no getrusage on this platform")
	}
	const burn = 30 * time.Millisecond
	var res RoundResult
	err := Timed(&res, func() error {
		var wg sync.WaitGroup
		wg.Go(func() { // spins until the process has used burn more CPU
			start, _ := processCPU()
			x := 0
			for {
				for i := range 1 << 16 {
					x += i
				}
				if now, _ := processCPU(); now-start >= burn {
					break
				}
			}
			_ = x
		})
		wg.Wait()
		return nil
	})
	if err != nil || !res.CPUMeasured || res.CPU < burn {
		t.Fatalf("Timed: err %v, CPU %v (measured %t), want at least %v", err, res.CPU, res.CPUMeasured, burn)
	}
	w := &Workload{Name: "T/cpu", Impls: []Impl{{Name: "kvbuf", Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
		r := RoundResult{Ops: 2, Checks: 1}
		return r, Timed(&r, func() error {
			start, _ := processCPU()
			for now := start; now-start < burn; now, _ = processCPU() {
			}
			return nil
		})
	})}}}
	rows, err := w.Run(context.Background(), 2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; len(r.CPUNsPerOp) != 2 || r.CPUPerOp < float64(burn.Nanoseconds())/2 || r.JSON().CPUNsPerOp == nil {
		t.Errorf("CPU per op %v (rounds %v), want at least %v", r.CPUPerOp, r.CPUNsPerOp, burn/2)
	}
}

// TestReadBackRequired: a write workload's row that reads nothing back
// fails the run, and a Looper's ReadBacker is called after each round.
func TestReadBackRequired(t *testing.T) {
	ctx := context.Background()
	lazy := RoundFunc(func(context.Context, int) (RoundResult, error) { return RoundResult{Ops: 1, Checks: 1}, nil })
	careful := RoundFunc(func(context.Context, int) (RoundResult, error) {
		return RoundResult{Ops: 1, Checks: 1, ReadBack: 5}, nil
	})
	w := &Workload{Name: "T/writes", Writes: true, Impls: []Impl{{Name: "kvbuf", Round: careful}, {Name: "lazy", Round: lazy}}}
	if _, err := w.Run(ctx, 1, 1, nil); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "lazy") {
		t.Errorf("a write row that read nothing back: %v", err)
	}
	w.Impls[1] = Impl{Name: "floor", Floor: true, Round: lazy}
	rows, err := w.Run(ctx, 2, 1, nil)
	if err != nil {
		t.Fatalf("a floor row need not read back: %v", err)
	}
	if rows[0].ReadBack != 10 || rows[0].JSON().ReadBack != 10 {
		t.Errorf("read back %d over 2 rounds, want 10", rows[0].ReadBack)
	}
	rb := &countBack{}
	w = &Workload{Name: "T/loop-writes", Ops: 3, Writes: true, Impls: []Impl{{Name: "kvbuf", Loop: rb}}}
	if _, err := w.Run(ctx, 2, 1, nil); err != nil || rb.calls != 3 {
		t.Errorf("ReadBacker: err %v, %d calls (want 3: warm-up and 2 rounds)", err, rb.calls)
	}
	rb.err = fmt.Errorf("%w: test", ErrReadBack)
	if _, err := w.Run(ctx, 1, 1, nil); !errors.Is(err, ErrReadBack) {
		t.Errorf("ReadBacker error: %v", err)
	}
}

type countBack struct {
	calls int
	err   error
}

func (c *countBack) Loop(_, lo, hi int) (int64, error) { return int64(hi - lo), nil }

func (c *countBack) ReadBack(context.Context) (int64, error) {
	c.calls++
	return 1, c.err
}

func TestReadBackSample(t *testing.T) {
	if got := readBackSample(5, -1, 3); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Errorf("all: %v", got)
	}
	if got := readBackSample(5, 10, 3); len(got) != 5 {
		t.Errorf("more than n: %v", got)
	}
	seen := map[int]bool{}
	for r := range uint64(10) {
		got := readBackSample(100, 10, r)
		if len(got) != 10 || got[0] != int(r%10) {
			t.Errorf("round %d: %v", r, got)
		}
		for _, i := range got {
			if i < 0 || i >= 100 {
				t.Fatalf("index %d out of range", i)
			}
			seen[i] = true
		}
	}
	if len(seen) != 100 {
		t.Errorf("10 rounds of 10 out of 100 checked %d distinct values, want all", len(seen))
	}
	if readBackSample(0, 10, 1) != nil {
		t.Error("sample of nothing")
	}
}

// TestBrokenBaselineFails runs W8's end-to-end workload, with every value
// read back as kvtool bench --quick does, next to two deliberately broken
// pebble baselines built from the real rows' parts: one drops one put of
// the round, one writes one stale value. Each must fail the run with
// ErrReadBack naming it; the real rows must pass.
func TestBrokenBaselineFails(t *testing.T) {
	ctx := context.Background()
	c, err := (&Config{Dir: t.TempDir(), Scale: 0.001, ReadBack: -1}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Suite{Name: "W8", dir: t.TempDir()}
	defer s.Close()
	st, err := newW8State(s, c)
	if err != nil {
		t.Fatal(err)
	}
	p := newW8Puts(distinct(rand.New(rand.NewPCG(1, 2)), 4*w8Batch, w6Space))
	w := &Workload{Name: "W8/end-to-end-unique", Unit: "put", Writes: true, Impls: st.endToEnd(p)}
	if _, err := w.Run(ctx, 1, 1, nil); err != nil {
		t.Fatalf("the real rows: %v", err)
	}
	drop := p.len() / 2
	broken := map[string]func(context.Context) error{
		"pebble-drops-a-put": func(context.Context) error {
			b := st.store.NewBatch()
			defer b.Close()
			for i := range p.len() {
				if i != drop {
					if err := b.Set(p.stored.at(i), p.val(i), nil); err != nil {
						return err
					}
				}
			}
			return b.Commit(pebble.Sync)
		},
		"pebble-writes-a-stale-value": func(context.Context) error {
			if err := pebbleOneBatch(st.store, p); err != nil {
				return err
			}
			stale := append([]byte(nil), p.val(drop)...)
			stale[len(stale)-1]--
			return st.store.Set(p.stored.at(drop), stale, pebble.Sync)
		},
	}
	for name, write := range broken {
		w.Impls = append(st.endToEnd(p)[:2], Impl{Name: name, Round: st.writeRound(name, p, write, pebbleGetter(st.store), nil)})
		_, err := w.Run(ctx, 1, 1, nil)
		if !errors.Is(err, ErrReadBack) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want ErrReadBack naming it", name, err)
		}
	}
}

// TestDiskPerUserByte: a round is charged the bytes the process writes to
// disk from its start to the end of the workload's settle step (a row that
// writes and syncs 8 MiB per round reports at least that; a row whose
// background writer the settle step waits for is charged for it too); a
// row that writes nothing reports 0; a run in which no row counted a byte,
// or a workload without UserBytesPerOp, reports nothing.
func TestDiskPerUserByte(t *testing.T) {
	const size = 8 << 20
	dir := t.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	write := func(name string) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	d0, ok := workload.ProcessDiskWrites()
	if !ok {
		t.Skip("no disk write count on this system")
	}
	if err := write("probe"); err != nil {
		t.Fatal(err)
	}
	if d1, _ := workload.ProcessDiskWrites(); d1 == d0 {
		t.Skip("a synced write did not move the count: none on this file system")
	}
	ctx := context.Background()
	round := func(name string, f func() error) Impl {
		return Impl{Name: name, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			res := RoundResult{Ops: 2, Checks: 1}
			return res, Timed(&res, f)
		})}
	}
	// The background row's round hands its write to a goroutine that the
	// settle step releases and waits for: a store's compaction after the
	// clock.
	var bg sync.WaitGroup
	started := false // the harness runs a round, then its settle step, on one goroutine
	release := make(chan struct{})
	bgErr := make(chan error, 1)
	w := &Workload{Name: "T/disk", UserBytesPerOp: size / 8, Impls: []Impl{
		round("kvbuf", func() error { return write("own") }),
		round("background", func() error {
			started = true
			bg.Go(func() {
				<-release
				bgErr <- write("background")
			})
			return nil
		}),
		round("nothing", func() error { return nil }),
	}, settle: func(context.Context) error {
		if !started {
			return nil
		}
		started = false
		release <- struct{}{}
		bg.Wait()
		return <-bgErr
	}}
	rows, err := w.Run(ctx, 3, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// size bytes over 2 ops of size/8 user bytes: 4, less at most an
	// eighth for pages of files removed by earlier tests before writeback,
	// which the kernel may take back (cancelled_write_bytes) meanwhile.
	for _, r := range rows[:2] {
		if len(r.DiskBytesPerUserByte) != 3 || slices.Min(r.DiskBytesPerUserByte) < 3.5 || r.JSON().DiskBytesPerUserByte == nil {
			t.Errorf("%s: disk bytes per user byte %v (rounds %v), want at least 3.5 in each of 3 rounds", r.Impl, r.DiskPerUserByte, r.DiskBytesPerUserByte)
		}
	}
	if r := rows[2]; len(r.DiskBytesPerUserByte) != 3 || r.DiskPerUserByte > 0.5 || r.JSON().DiskBytesPerUserByte == nil {
		t.Errorf("nothing: disk bytes per user byte %v (rounds %v), want about 0, reported", r.DiskPerUserByte, r.DiskBytesPerUserByte)
	}
	if d := rows[0].Ratios["background"].Disk; d < 0.5 || d > 2 || rows[0].JSON().DiskRatioVs["background"] != d {
		t.Errorf("disk ratio of background to kvbuf %v (JSON %v), want about 1", d, rows[0].JSON().DiskRatioVs)
	}

	// A settle step that finds a store still busy at its deadline: the
	// round runs, the row reports no disk figure.
	busy := &Workload{Name: "T/busy", UserBytesPerOp: size / 8, Impls: []Impl{round("kvbuf", func() error { return write("busy") })},
		settle: func(context.Context) error { return fmt.Errorf("store: %w", workload.ErrStillBusy) }}
	if rows, err := busy.Run(ctx, 2, 1, nil); err != nil {
		t.Fatalf("%s: %v, want the rounds run", busy.Name, err)
	} else if r := rows[0]; r.DiskBytesPerUserByte != nil || r.DiskPerUserByte != 0 || r.JSON().DiskBytesPerUserByte != nil {
		t.Errorf("%s: disk figure %v (rounds %v), want none", busy.Name, r.DiskPerUserByte, r.DiskBytesPerUserByte)
	}

	quiet := &Workload{Name: "T/no-disk", UserBytesPerOp: 1, Impls: []Impl{round("kvbuf", func() error { return nil })}}
	unmeasured := &Workload{Name: "T/unmeasured", Impls: []Impl{round("kvbuf", func() error { return write("unmeasured") })}}
	for _, w := range []*Workload{quiet, unmeasured} {
		rows, err := w.Run(ctx, 2, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := rows[0]; r.DiskBytesPerUserByte != nil || r.DiskPerUserByte != 0 || r.JSON().DiskBytesPerUserByte != nil {
			t.Errorf("%s: disk figure %v (rounds %v), want none", w.Name, r.DiskPerUserByte, r.DiskBytesPerUserByte)
		}
	}
}

// TestDiskOverAllRounds: a row's disk figure is its rounds' disk bytes
// summed over their user bytes summed, not the median of the per-round
// figures (which picks one of two values when a compaction lands every
// other round); the ratio between two rows is of those figures; a round
// whose settle step found a store still busy leaves the row with none.
func TestDiskOverAllRounds(t *testing.T) {
	rowOf := func(rounds ...RoundResult) Row {
		var row Row
		var s rowSamples
		for _, res := range rounds {
			res.DiskMeasured = true
			s.add(&row, res, 0, 1)
		}
		s.summarize(&row)
		return row
	}
	// Per round 1, 1 and 10 bytes per user byte: median 1, over all 4.
	own := rowOf(RoundResult{Ops: 1, DiskBytes: 1}, RoundResult{Ops: 1, DiskBytes: 1}, RoundResult{Ops: 1, DiskBytes: 10})
	if own.DiskPerUserByte != 4 || !slices.Equal(own.DiskBytesPerUserByte, []float64{1, 1, 10}) {
		t.Errorf("disk figure %v (rounds %v), want 4 (rounds 1 1 10)", own.DiskPerUserByte, own.DiskBytesPerUserByte)
	}
	// Rounds of different sizes: 1 byte over 1 and 27 over 3 are 28 over 4.
	if r := rowOf(RoundResult{Ops: 1, DiskBytes: 1}, RoundResult{Ops: 3, DiskBytes: 27}); r.DiskPerUserByte != 7 {
		t.Errorf("disk figure %v (rounds %v), want 7", r.DiskPerUserByte, r.DiskBytesPerUserByte)
	}
	base := rowOf(RoundResult{Ops: 1, DiskBytes: 8}, RoundResult{Ops: 1, DiskBytes: 8}, RoundResult{Ops: 1, DiskBytes: 8})
	for _, r := range []*Row{&own, &base} {
		r.NsPerOp = []float64{1, 1, 1}
	}
	if d := pairRatio(base, own).Disk; d != 2 {
		t.Errorf("disk ratio %v, want 8/4 = 2", d)
	}
	lost := rowOf(RoundResult{Ops: 1, DiskBytes: 1}, RoundResult{Ops: 1, DiskBytes: 1, diskLost: true})
	if lost.DiskPerUserByte != 0 || lost.DiskBytesPerUserByte != nil {
		t.Errorf("disk figure with a lost round %v (rounds %v), want none", lost.DiskPerUserByte, lost.DiskBytesPerUserByte)
	}
}

// TestBusyRounds: a round whose quiesce step found a store still busy at
// its deadline is counted in its row (Row.BusyRounds and its JSON), in a
// row without a disk figure too (reads timed during a compaction must not
// go unmarked); a settle step's is counted in a row with one; a row whose
// steps found every store idle counts none.
func TestBusyRounds(t *testing.T) {
	ctx := t.Context()
	one := RoundFunc(func(context.Context, int) (RoundResult, error) { return RoundResult{Ops: 1, Checks: 1}, nil })
	calls := 0
	everyOther := func(context.Context) error {
		calls++
		if calls%2 == 0 {
			return fmt.Errorf("store: %w", workload.ErrStillBusy)
		}
		return nil
	}
	alwaysBusy := func(context.Context) error { return workload.ErrStillBusy }
	for _, tc := range []struct {
		w    *Workload
		want int
	}{
		// One warm-up round (call 1), then 4 measured rounds (calls 2-5).
		{&Workload{Name: "T/reads", quiesce: everyOther, Impls: []Impl{{Name: "kvbuf", Round: one}}}, 2},
		{&Workload{Name: "T/settle", UserBytesPerOp: 1, settle: alwaysBusy, Impls: []Impl{{Name: "kvbuf", Round: one}}}, 4},
		{&Workload{Name: "T/idle", quiesce: func(context.Context) error { return nil }, Impls: []Impl{{Name: "kvbuf", Round: one}}}, 0},
	} {
		if _, ok := workload.ProcessDiskWrites(); !ok && tc.w.settle != nil {
			continue // no disk count: no settle step runs
		}
		calls = 0
		rows, err := tc.w.Run(ctx, 4, 1, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.w.Name, err)
		}
		r := rows[0]
		if r.BusyRounds != tc.want || r.JSON().BusyRounds != tc.want {
			t.Errorf("%s: BusyRounds %d (JSON %d), want %d", tc.w.Name, r.BusyRounds, r.JSON().BusyRounds, tc.want)
		}
	}
	b, err := json.Marshal(Row{Workload: "T", Impl: "kvbuf", BusyRounds: 3}.JSON())
	if err != nil || !strings.Contains(string(b), `"busy_rounds":3`) {
		t.Errorf("JSON of a row with 3 busy rounds: %s (%v), want busy_rounds 3", b, err)
	}
	if b, _ := json.Marshal(Row{Workload: "T", Impl: "kvbuf"}.JSON()); strings.Contains(string(b), "busy_rounds") {
		t.Errorf("JSON of a row without busy rounds: %s, want no busy_rounds", b)
	}
}
