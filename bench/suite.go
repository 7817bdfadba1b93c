package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/kvbuf/kvbuf"
)

// Config sizes the workloads. A nil *Config means defaults; a zero field
// means that field's default.
type Config struct {
	// Dir is where the suites create their engines and files (each in a
	// subdirectory made with os.MkdirTemp and removed by Suite.Close).
	// Default: os.TempDir().
	Dir string

	// Scale multiplies every size of doc/workloads.md (1,000,000 bit sets
	// and lookups, 4,194,304 bits, 1,048,576 stored keys, ...). Small
	// values make smoke tests fast; sizes never drop below a few dozen.
	// Default: 1.
	Scale float64

	// Seed seeds every random input. Default: 1.
	Seed uint64

	// FlushesPerGoroutine is W4's count: how many {write, Flush}
	// iterations each goroutine does per round (at g64 a quarter of it,
	// at least 1). Default: 200.
	FlushesPerGoroutine int

	// Scans is the number of 10,000-key range scans per W2 scan-10k round.
	// Default: 100 × Scale, at least 3.
	Scans int

	// WriteRate is W7's writer rate in writes per second (each write is
	// one KV put or delete, or one bit set, alternately). Default: 100,000.
	WriteRate int

	// ReadBack is how many of the values a write row wrote in a round it
	// reads back afterwards (not timed) and compares with what it wrote,
	// spread over the round's writes; a mismatch fails the run with
	// ErrReadBack. Negative: every value (kvtool bench --quick). Default:
	// DefaultReadBack.
	ReadBack int
}

// DefaultFlushesPerGoroutine is the default Config.FlushesPerGoroutine.
const DefaultFlushesPerGoroutine = 200

// DefaultWriteRate is the default Config.WriteRate.
const DefaultWriteRate = 100_000

func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0) || o.Scale > 100 {
		return o, fmt.Errorf("%w: scale %v (want 0 < scale <= 100)", ErrBadConfig, o.Scale)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.FlushesPerGoroutine == 0 {
		o.FlushesPerGoroutine = DefaultFlushesPerGoroutine
	}
	if o.FlushesPerGoroutine < 0 {
		return o, fmt.Errorf("%w: flushes per goroutine %d", ErrBadConfig, o.FlushesPerGoroutine)
	}
	if o.Scans == 0 {
		o.Scans = o.scaled(100, 3)
	}
	if o.Scans < 0 {
		return o, fmt.Errorf("%w: scans %d", ErrBadConfig, o.Scans)
	}
	if o.WriteRate == 0 {
		o.WriteRate = DefaultWriteRate
	}
	if o.WriteRate < 0 {
		return o, fmt.Errorf("%w: write rate %d", ErrBadConfig, o.WriteRate)
	}
	if o.ReadBack == 0 {
		o.ReadBack = DefaultReadBack
	}
	return o, nil
}

// scaled returns n × Scale, at least lo.
func (c Config) scaled(n int, lo int) int {
	return max(int(float64(n)*c.Scale), lo)
}

// Suite is one workload family set up once: its workloads share the
// engines and files in one temporary directory. Close releases them and
// removes the directory.
type Suite struct {
	// Name is the suite's name (Catalog).
	Name string
	// Workloads are in the order they must run (some prepare the state of
	// the next: W1's pending changes, open snapshots).
	Workloads []*Workload

	dir     string
	closers []func() error
	closed  bool
}

// Dir returns the suite's temporary directory.
func (s *Suite) Dir() string { return s.dir }

// onClose registers f to run at Close, in reverse order of registration.
func (s *Suite) onClose(f func() error) { s.closers = append(s.closers, f) }

// add appends workloads to the suite.
func (s *Suite) add(ws ...*Workload) {
	for _, w := range ws {
		w.suite = s
		s.Workloads = append(s.Workloads, w)
	}
}

// Close closes every engine and file of the suite and removes its
// directory. It is idempotent.
func (s *Suite) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	for _, f := range slices.Backward(s.closers) {
		err = errors.Join(err, f())
	}
	if s.dir != "" {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	if err != nil {
		return fmt.Errorf("bench: close suite %s: %w", s.Name, err)
	}
	return nil
}

// Workload returns the suite's workload called name, or nil.
func (s *Suite) Workload(name string) *Workload {
	for _, w := range s.Workloads {
		if w.Name == name {
			return w
		}
	}
	return nil
}

// SuiteInfo names a suite and its workloads.
type SuiteInfo struct {
	// Name is the suite's name for Open ("W1", …, "W2-memory").
	Name string
	// Workloads are its canonical workload names, in run order. Their
	// family (Family) is the part before the "/".
	Workloads []string
	// Parallel lists the workloads that run at several goroutine counts
	// (kvtool bench --cpu).
	Parallel []string
}

// Family returns the family of a workload name: "W2" for "W2/gc-1m".
func Family(workload string) string {
	f, _, _ := strings.Cut(workload, "/")
	return f
}

// Catalog lists every suite and its canonical workload names, in run
// order, without setting anything up (for selecting workloads by name).
func Catalog() []SuiteInfo {
	w1 := []string{"W1/lookup-without-pending-changes", "W1/lookup-with-pending-changes", "W1/lookup-sparse"}
	w2 := []string{"W2/get-pending-hit", "W2/get-pending-tombstone", "W2/get-miss", "W2/get-mixed"}
	w3 := []string{"W3/hit_same_key", "W3/hit_disjoint-64", "W3/hit_disjoint-1024", "W3/miss_churn-64", "W3/mixed-64"}
	return []SuiteInfo{
		{"W1", append(slices.Clone(w1),
			"W1/count-with-pending-changes", "W1/ones-with-pending-changes",
			"W1/lookup-with-pending-changes-1-snapshot", "W1/lookup-with-pending-changes-16-snapshots"), w1},
		{"W2", append(slices.Clone(w2),
			"W2/scan-10k", "W2/get-pending-hit-1-snapshot", "W2/get-pending-hit-16-snapshots",
			"W2/first-iter-1m", "W2/interleaved-puts-scans"), w2},
		{"W2-memory", []string{"W2/gc-1m"}, nil},
		{"W3", append(slices.Clone(w3), "W3/construct"), w3},
		{"W4", []string{"W4/flush-g1", "W4/flush-g4", "W4/flush-g16", "W4/flush-g64", "W4/flush-g16-think1ms"}, nil},
		{"W6", []string{"W6/flush-kv-1m", "W6/flush-bits-1m"}, nil},
		{"W7", []string{"W7/get-mixed-under-writes", "W7/lookup-under-writes"}, nil},
		{"W8", []string{"W8/batch-64-puts", "W8/end-to-end-unique", "W8/end-to-end-hot-keys-x10", "W8/delete-1m"}, nil},
		{"W10", []string{"W10/ones-sparse", "W10/lookup-sparse", "W10/count-sparse", "W10/pending-memory-1m"}, []string{"W10/lookup-sparse"}},
		{"W11", []string{"W11/budget-1000-engines"}, nil},
		{"W11-largest", []string{"W11/budget-1000-engines-largest-first"}, nil},
	}
}

// setups maps each suite of Catalog to the function that sets it up.
var setups = map[string]func(context.Context, *Suite, Config) error{
	"W1":          setupW1,
	"W2":          setupW2,
	"W2-memory":   setupW2Memory,
	"W3":          setupW3,
	"W4":          setupW4,
	"W6":          setupW6,
	"W7":          setupW7,
	"W8":          setupW8,
	"W10":         setupW10,
	"W11":         setupW11(0, ImplKvbuf, "W11/budget-1000-engines"), // the default policy
	"W11-largest": setupW11(kvbuf.BudgetLargestFirst, ImplKvbuf, "W11/budget-1000-engines-largest-first"),
}

// Open sets up the suite called name (see Catalog) in a new temporary
// directory under cfg.Dir. The caller must Close it. ctx is checked while
// the suite is set up (at full scale, seconds to tens of seconds): if it
// ends, Open removes what it made and returns ctx's error.
func Open(ctx context.Context, name string, cfg *Config) (*Suite, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	setup := setups[name]
	if setup == nil {
		return nil, fmt.Errorf("%w: unknown suite %q", ErrBadConfig, name)
	}
	dir, err := os.MkdirTemp(c.Dir, "kvbuf-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s := &Suite{Name: name, dir: dir}
	if err := setup(ctx, s, c); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: set up %s in %s: %w", name, dir, err), s.Close())
	}
	return s, nil
}
