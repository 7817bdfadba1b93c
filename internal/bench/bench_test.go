package bench

import (
	"context"
	"errors"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

var benchScale = flag.Float64("scale", 1, "scale of the W1/W2 sizes for the Benchmark functions (1 = workloads.md)")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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

func TestRunRotatesOrder(t *testing.T) {
	var order []string
	mk := func(name string) Impl {
		return Impl{Name: name, Op: func(i int) (int, error) {
			if i == 0 {
				order = append(order, name)
			}
			return i % 2, nil
		}}
	}
	w := &Workload{Name: "T/rotate", Ops: 4, Impls: []Impl{mk("kvbuf"), mk("b"), mk("c")}}
	var steps []string
	rows, err := w.Run(context.Background(), 4, func(impl string, round int) { steps = append(steps, impl) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kvbuf", "b", "c", "b", "c", "kvbuf", "c", "kvbuf", "b", "kvbuf", "b", "c"}
	if !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
	if !slices.Equal(steps, want) {
		t.Errorf("progress steps %v, want %v", steps, want)
	}
	if len(rows) != 3 || rows[0].Impl != "kvbuf" || rows[2].Impl != "c" {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.Rounds != 4 || len(r.NsPerOp) != 4 || r.OpsPerRound != 4 {
			t.Errorf("%s: rounds %d, samples %d, ops %d", r.Impl, r.Rounds, len(r.NsPerOp), r.OpsPerRound)
		}
		if r.Min > r.Median || r.Median > r.Max {
			t.Errorf("%s: min %v median %v max %v out of order", r.Impl, r.Min, r.Median, r.Max)
		}
	}
	if len(rows[0].RatioVs) != 2 || rows[1].RatioVs != nil {
		t.Errorf("ratios: kvbuf %v, b %v", rows[0].RatioVs, rows[1].RatioVs)
	}
}

func TestRunDetectsMismatch(t *testing.T) {
	count := func(c int) func(int) (int, error) { return func(int) (int, error) { return c, nil } }
	w := &Workload{Name: "T/mismatch", Ops: 3, Impls: []Impl{
		{Name: "kvbuf", Op: count(1)},
		{Name: "floor", Floor: true, Op: count(0)}, // floors are not compared
		{Name: "wrong", Op: count(2)},
	}}
	_, err := w.Run(context.Background(), 1, nil)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "wrong counted 6") {
		t.Fatalf("err = %v, want ErrMismatch naming the wrong row", err)
	}
	w.Impls = w.Impls[:2]
	if _, err := w.Run(context.Background(), 1, nil); err != nil {
		t.Fatalf("floor row compared: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	boom := errors.New("boom")
	w := &Workload{Name: "T/err", Ops: 2, Impls: []Impl{{Name: "kvbuf", Op: func(int) (int, error) { return 0, boom }}}}
	if _, err := w.Run(context.Background(), 1, nil); !errors.Is(err, boom) {
		t.Errorf("op error: %v", err)
	}
	if _, err := w.Run(context.Background(), 0, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("0 rounds: %v", err)
	}
	if _, err := (&Workload{Name: "T/empty"}).Run(context.Background(), 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no impls: %v", err)
	}
	if _, err := (&Workload{Name: "T/none", Impls: []Impl{{Name: "x"}}}).Run(context.Background(), 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("impl without Op or Round: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := &Workload{Name: "T/ok", Ops: 1, Impls: []Impl{{Name: "kvbuf", Op: func(int) (int, error) { return 0, nil }}}}
	if _, err := ok.Run(ctx, 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func TestOpenBadConfig(t *testing.T) {
	ctx := context.Background()
	for _, c := range []*Config{{Scale: -1}, {Scale: 1000}, {FlushesPerGoroutine: -1}, {Scans: -2}} {
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
// canonical, the flush baselines must behave as documented.
func TestSuites(t *testing.T) {
	ctx := context.Background()
	for _, info := range Catalog() {
		t.Run(info.Name, func(t *testing.T) {
			s, err := Open(ctx, info.Name, &Config{Dir: t.TempDir(), Scale: 0.0005, FlushesPerGoroutine: 2, Scans: 2})
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
			var names []string
			for _, w := range s.Workloads {
				names = append(names, w.Name)
				rows, err := w.Run(ctx, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				own := 0
				for _, r := range rows {
					if IsOwn(r.Impl) {
						own++
					}
				}
				if rows[0].Impl != ImplKvbuf || len(rows[0].RatioVs) != len(rows)-own {
					t.Errorf("%s: first row %s with ratios %v", w.Name, rows[0].Impl, rows[0].RatioVs)
				}
				for _, r := range rows {
					if r.Median <= 0 || r.OpsPerRound <= 0 {
						t.Errorf("%s/%s: median %v, ops %d", w.Name, r.Impl, r.Median, r.OpsPerRound)
					}
					if !strings.HasPrefix(w.Name, "W4/") {
						continue
					}
					if r.Flushes != int64(r.OpsPerRound*2) || r.P99FlushNs < r.P50FlushNs || r.P50FlushNs <= 0 {
						t.Errorf("%s/%s: flushes %d ops %d p50 %v p99 %v", w.Name, r.Impl, r.Flushes, r.OpsPerRound, r.P50FlushNs, r.P99FlushNs)
					}
					switch r.Impl {
					case ImplKvbuf:
						if r.Violations != 0 || r.SyncsPerFlush() > 1 || r.Syncs == 0 {
							t.Errorf("%s/kvbuf: %d violations, %d syncs for %d flushes", w.Name, r.Violations, r.Syncs, r.Flushes)
						}
					case ImplPerCallerSync:
						if r.Violations != 0 || r.Syncs != r.Flushes {
							t.Errorf("%s/per-caller-sync: %d violations, %d syncs for %d flushes", w.Name, r.Violations, r.Syncs, r.Flushes)
						}
					}
				}
			}
			if !slices.Equal(names, info.Workloads) {
				t.Errorf("workloads %v, catalog says %v", names, info.Workloads)
			}
		})
	}
}

// benchSuite runs the suite's workloads as sub-benchmarks
// (BenchmarkW1/lookup-with-pending-changes/kvbuf, …) over the same Impl
// code kvtool bench times. One b.Loop iteration is one operation (a lookup,
// a Get, a scan) for W1 and W2, one round for W4.
func benchSuite(b *testing.B, name string) {
	ctx := context.Background()
	s, err := Open(ctx, name, &Config{Dir: b.TempDir(), Scale: *benchScale})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	}()
	for _, w := range s.Workloads {
		if err := w.Prepare(ctx); err != nil {
			b.Fatal(err)
		}
		sub := strings.TrimPrefix(w.Name, name+"/")
		for _, im := range w.Impls {
			b.Run(sub+"/"+im.Name, func(b *testing.B) {
				b.ReportAllocs()
				if im.Round != nil {
					var flushes, syncs, viol, ops int64
					for b.Loop() {
						r, err := im.Round(ctx)
						if err != nil {
							b.Fatal(err)
						}
						flushes, syncs, viol, ops = flushes+r.Flushes, syncs+r.Syncs, viol+r.Violations, ops+int64(r.Ops)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(ops, 1)), "ns/write")
					b.ReportMetric(float64(syncs)/float64(max(flushes, 1)), "syncs/flush")
					b.ReportMetric(float64(viol), "violations")
					return
				}
				i := 0
				for b.Loop() {
					if _, err := im.Op(i); err != nil {
						b.Fatal(err)
					}
					if i++; i == w.Ops {
						i = 0
					}
				}
			})
		}
	}
}

// BenchmarkW1 is W1 (bitslice lookups). -scale shrinks it.
func BenchmarkW1(b *testing.B) { benchSuite(b, "W1") }

// BenchmarkW2 is W2 (key-value lookups over pebble).
func BenchmarkW2(b *testing.B) { benchSuite(b, "W2") }

// BenchmarkW4 is W4 (flush coalescing); ns/op is per round.
func BenchmarkW4(b *testing.B) { benchSuite(b, "W4") }
