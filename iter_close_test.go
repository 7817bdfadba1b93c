package kvbuf

// TestIterRacingClose (issue 30): iterators of every kind racing DB.Close
// either yield keys that are in the data, with their values, or stop with
// ErrClosed (a positioning call returns false, Valid is false, Key and
// Value are nil, Error carries ErrClosed); a key and value that a
// positioning call returned stay readable until the next positioning call,
// however the engine's Close has progressed meanwhile. The reported bug: a
// backward scan of a stable prefix whose Prev returned true while Key and
// Value returned nil (Valid re-checked the engine's closing flag, so the
// iterator's answer changed between the move and the read).
//
// Each round opens an engine with a stable prefix of keys (some in
// sstables, some in the write-ahead log, some pending, some pending over
// stored ones), starts writers and batch writers on other keys and
// keyspaces, scanners of each kind (forward, backward, prefix, bounds,
// snapshot, All) that take a fresh iterator for every scan, CPU-bound
// goroutines, and after a random delay three goroutines that call Close.
// Two CPU-bound processes run beside the whole test. GOMAXPROCS is well
// above the cores. The normal run takes 50 rounds; -kvbuf.iterclose.rounds
// (or KVBUF_ITERCLOSE_ROUNDS) sets another number.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

var iterCloseRounds = flag.Int("kvbuf.iterclose.rounds", 0, "rounds of TestIterRacingClose (0: the short default; env KVBUF_ITERCLOSE_ROUNDS)")

func init() { childRoles["spin"] = spinChild }

// spinChild is a CPU-bound process: it spins until its standard input
// closes (the parent ended), or for at most ten minutes.
func spinChild() int {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	deadline := time.Now().Add(10 * time.Minute)
	x := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
	}
	return x & 0
}

// startSpinners starts n CPU-bound child processes, ended by the test's
// cleanup.
func startSpinners(t *testing.T, n int) {
	for range n {
		cmd := testutil.Reexec(t, "spin")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = in.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

const (
	icStable = 100 // stable keys st-000 .. st-099
	icLo     = 10  // the bounds scans read [st-010, st-090)
	icHi     = 90
)

func icKey(i int) []byte   { return fmt.Appendf(nil, "st-%03d", i) }
func icValue(i int) string { return fmt.Sprintf("value of st-%03d", i) }

// icWriterValue is the value a writer puts under key: a scan that meets a
// writer's key checks it against its value.
func icWriterValue(key []byte) string { return "val:" + string(key) }

// icCheck checks one key and value a scan returned: a stable key with its
// value, or (outside the stable prefix) a writer's key with its value.
func icCheck(key, val []byte) error {
	if bytes.HasPrefix(key, []byte("st-")) {
		var i int
		if _, err := fmt.Sscanf(string(key), "st-%03d", &i); err != nil || i < 0 || i >= icStable || !bytes.Equal(key, icKey(i)) {
			return fmt.Errorf("key %q is not in the data", key)
		}
		if string(val) != icValue(i) {
			return fmt.Errorf("key %q has value %q, want %q", key, val, icValue(i))
		}
		return nil
	}
	if !bytes.HasPrefix(key, []byte("w")) || string(val) != icWriterValue(key) {
		return fmt.Errorf("key %q (value %q) is not in the data", key, val)
	}
	return nil
}

// icKind is one kind of scan: how it makes its iterator, which way it
// goes, and which stable keys it must see, in its order (nil: it also sees
// writers' keys, whose number it cannot know).
type icKind struct {
	name string
	back bool
	all  bool // through Iter.All
	snap bool
	opts *IterOptions
	want func() []string // the stable keys the scan sees, in order
}

func icRange(lo, hi int, back bool) []string {
	var ks []string
	for i := lo; i < hi; i++ {
		ks = append(ks, string(icKey(i)))
	}
	if back {
		for i, j := 0, len(ks)-1; i < j; i, j = i+1, j-1 {
			ks[i], ks[j] = ks[j], ks[i]
		}
	}
	return ks
}

var icKinds = []icKind{
	{name: "forward", want: func() []string { return icRange(0, icStable, false) }},
	{name: "backward", back: true, want: func() []string { return icRange(0, icStable, true) }},
	{name: "prefix-backward", back: true, opts: &IterOptions{Prefix: []byte("st-")}, want: func() []string { return icRange(0, icStable, true) }},
	{name: "prefix-forward", opts: &IterOptions{Prefix: []byte("st-")}, want: func() []string { return icRange(0, icStable, false) }},
	{name: "bounds", opts: &IterOptions{LowerBound: icKey(icLo), UpperBound: icKey(icHi)}, want: func() []string { return icRange(icLo, icHi, false) }},
	{name: "bounds-backward", back: true, opts: &IterOptions{LowerBound: icKey(icLo), UpperBound: icKey(icHi)}, want: func() []string { return icRange(icLo, icHi, true) }},
	{name: "snapshot-backward", back: true, snap: true, want: func() []string { return icRange(0, icStable, true) }},
	{name: "snapshot-prefix", snap: true, opts: &IterOptions{Prefix: []byte("st-")}, want: func() []string { return icRange(0, icStable, false) }},
	{name: "all", all: true, want: func() []string { return icRange(0, icStable, false) }},
}

// icStats counts what the scans saw, per kind.
type icStats struct {
	mu       sync.Mutex
	complete map[string]int // scans that ended at the end of their range
	closed   map[string]int // scans stopped by ErrClosed after their iterator was made
	keys     map[string]int // keys returned
	held     map[string]int // positions re-read after a pause
}

func (s *icStats) add(kind string, complete, closed bool, keys, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if complete {
		s.complete[kind]++
	}
	if closed {
		s.closed[kind]++
	}
	s.keys[kind] += keys
	s.held[kind] += held
}

func TestIterRacingClose(t *testing.T) {
	stressSetup(t)
	seed := testSeed(t)
	rounds := testutil.EnvInt(t, "KVBUF_ITERCLOSE_ROUNDS", 50)
	if *iterCloseRounds > 0 {
		rounds = *iterCloseRounds
	}
	if testing.Short() {
		rounds = min(rounds, 20)
	}
	startSpinners(t, 2)
	stats := &icStats{complete: map[string]int{}, closed: map[string]int{}, keys: map[string]int{}, held: map[string]int{}}
	base := stressDir(t)
	began := time.Now()
	for r := range rounds {
		if err := icRound(t, fmt.Sprintf("%s-%d", base, r), rand.New(rand.NewPCG(seed, uint64(r))), stats); err != nil {
			t.Fatalf("round %d (seed %d): %v", r, seed, err)
		}
	}
	var sb strings.Builder
	for _, k := range icKinds {
		fmt.Fprintf(&sb, "\n  %-18s %5d complete, %5d stopped by ErrClosed, %7d keys, %5d positions re-read after a pause",
			k.name, stats.complete[k.name], stats.closed[k.name], stats.keys[k.name], stats.held[k.name])
	}
	t.Logf("%d rounds in %v:%s", rounds, time.Since(began).Round(time.Millisecond), sb.String())
	for _, k := range icKinds {
		if rounds >= 50 && stats.closed[k.name] == 0 {
			t.Errorf("no %s scan was stopped by Close in %d rounds: the race was not exercised", k.name, rounds)
		}
	}
}

// icRound runs one round in dir.
func icRound(t *testing.T, dir string, rng *rand.Rand, stats *icStats) error {
	defer os.RemoveAll(dir)
	db, err := Open(dir, &Options{FlushInterval: time.Duration(1+rng.IntN(3)) * time.Millisecond})
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	k, err := db.KV("scan")
	if err != nil {
		return err
	}
	other, err := db.KV("other")
	if err != nil {
		return err
	}
	// The stable keys: a third in sstables, a third in the write-ahead
	// log, a third pending; every fifth also pending over a stored copy.
	for i := range icStable {
		if err := k.Put(ctx, icKey(i), []byte(icValue(i)), 0); err != nil {
			return err
		}
		switch i {
		case icStable / 3:
			if err := db.FlushMemtables(ctx); err != nil {
				return err
			}
		case 2 * icStable / 3:
			if err := db.Flush(ctx); err != nil {
				return err
			}
		}
	}
	for i := 0; i < 2*icStable/3; i += 5 {
		if err := k.Put(ctx, icKey(i), []byte(icValue(i)), 0); err != nil {
			return err
		}
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	sk, err := snap.KV("scan")
	if err != nil {
		return err
	}

	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	// Writers on keys around the stable prefix ("w..." sorts after
	// "st-"; the forward and backward scans cross them) and on another
	// keyspace, by single calls and batches.
	for w := range 2 {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				key := fmt.Appendf(nil, "w%d-%04d", w, wrng.IntN(500))
				var err error
				if n%3 == 0 {
					b := db.NewBatch()
					b.Put(k, key, []byte(icWriterValue(key)))
					b.Put(other, key, []byte(icWriterValue(key)))
					err = db.Apply(ctx, b, 0)
				} else {
					err = k.Put(ctx, key, []byte(icWriterValue(key)), 0)
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					fail(fmt.Errorf("writer %d: %w", w, err))
					return
				}
			}
		})
	}
	for _, kind := range icKinds {
		srng := rand.New(rand.NewPCG(rng.Uint64(), 1))
		var src iterable = k
		if kind.snap {
			src = sk
		}
		wg.Go(func() {
			for !stop.Load() {
				done, err := icScan(kind, src, srng, stats)
				if err != nil {
					fail(fmt.Errorf("%s scan: %w", kind.name, err))
					return
				}
				if done {
					return
				}
			}
		})
	}
	// CPU-bound goroutines: a scanner preempted between its move and its
	// read, a Close between its flag and its closing of the store.
	for range 3 {
		wg.Go(func() {
			x := 0
			for !stop.Load() {
				for i := range 20_000 {
					x += i
				}
				runtime.Gosched()
			}
			_ = x
		})
	}
	// Holders: an iterator of the keyspace and one of the snapshot, each
	// positioned at a stored key (in an sstable, whose block the store
	// releases at Close) before Close, read again once Close has returned.
	closed := make(chan struct{})
	for _, src := range []iterable{k, sk} {
		i := 1 + rng.IntN(icStable/3-1)
		if i%5 == 0 {
			i++ // not pending over the stored copy
		}
		it, err := src.NewIter(nil)
		if err != nil {
			return err
		}
		if !it.SeekGE(icKey(i)) || string(it.Key()) != string(icKey(i)) || string(it.Value()) != icValue(i) {
			_ = it.Close()
			return fmt.Errorf("holder: SeekGE(%s) = %q=%q, %v", icKey(i), it.Key(), it.Value(), it.Error())
		}
		key, val := it.Key(), it.Value()
		wg.Go(func() {
			defer it.Close()
			<-closed
			if k2, v2 := it.Key(), it.Value(); !bytes.Equal(k2, icKey(i)) || string(v2) != icValue(i) ||
				!bytes.Equal(key, icKey(i)) || string(val) != icValue(i) || !it.Valid() {
				fail(fmt.Errorf("holder at %s: after Close, Key %q, Value %q, Valid %v; the slices it returned before: %q, %q",
					icKey(i), k2, v2, it.Valid(), key, val))
				return
			}
			if it.Next() || it.Valid() || it.Key() != nil || !errors.Is(it.Error(), ErrClosed) {
				fail(fmt.Errorf("holder at %s: Next after Close moved (Valid %v, Key %q, Error %v)", icKey(i), it.Valid(), it.Key(), it.Error()))
			}
		})
	}
	time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
	var closers sync.WaitGroup
	closeErrs := make([]error, 3)
	for i := range closeErrs {
		closers.Go(func() { closeErrs[i] = db.Close() })
	}
	closers.Wait()
	close(closed)
	// The scanners stop on their own at their next move (ErrClosed).
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(closeErrs...); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	return firstErr
}

// icScan runs one scan of kind over src with a fresh iterator. done
// reports that the scan was stopped by ErrClosed (the engine is closed:
// the scanner is finished). A scan that checks out returns a nil error.
func icScan(kind icKind, src iterable, rng *rand.Rand, stats *icStats) (done bool, err error) {
	it, err := src.NewIter(kind.opts)
	if errors.Is(err, ErrClosed) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("NewIter: %w", err)
	}
	want := kind.want()
	var seen []string // the stable keys returned, in order
	keys, held := 0, 0
	check := func(key, val []byte) error {
		if err := icCheck(key, val); err != nil {
			return err
		}
		keys++
		if bytes.HasPrefix(key, []byte("st-")) {
			seen = append(seen, string(key))
			if n := len(seen); n > len(want) || seen[n-1] != want[n-1] {
				return fmt.Errorf("stable key %q returned after %d stable keys; the %s scan's next is %q", key, n-1, kind.name, wantAt(want, n-1))
			}
		}
		return nil
	}
	if kind.all {
		for key, val := range it.All() {
			if err := check(key, val); err != nil {
				_ = it.Close()
				return false, err
			}
		}
	} else {
		ok := it.First()
		if kind.back {
			ok = it.Last()
		}
		for ; ok; ok = icStep(it, kind.back) {
			if !it.Valid() {
				_ = it.Close()
				return false, fmt.Errorf("a positioning call returned true but Valid is false (Key %q, Error %v)", it.Key(), it.Error())
			}
			key, val := it.Key(), it.Value()
			if err := check(key, val); err != nil {
				_ = it.Close()
				return false, err
			}
			if rng.IntN(16) == 0 {
				// Hold the position a while (Close may run meanwhile) and
				// read it again: it must not have changed.
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				if k2, v2 := it.Key(), it.Value(); !bytes.Equal(k2, key) || !bytes.Equal(v2, val) || !it.Valid() {
					_ = it.Close()
					return false, fmt.Errorf("position %q=%q read again after a pause: Key %q, Value %q, Valid %v", key, val, k2, v2, it.Valid())
				}
				held++
			}
		}
	}
	iterErr := it.Error()
	closeErr := it.Close()
	stopped := errors.Is(iterErr, ErrClosed)
	switch {
	case iterErr != nil && !stopped:
		return false, fmt.Errorf("iterator error: %w", iterErr)
	case stopped && (it.Valid() || it.Key() != nil || it.Value() != nil):
		return false, fmt.Errorf("stopped by Close but still positioned (Valid %v, Key %q)", it.Valid(), it.Key())
	case stopped && (it.First() || it.Last() || it.Next() || it.Prev()):
		return false, fmt.Errorf("stopped by Close but a positioning call succeeded")
	case !stopped && len(seen) != len(want):
		return false, fmt.Errorf("scan ended without an error after %d of its %d stable keys (next %q)", len(seen), len(want), wantAt(want, len(seen)))
	case closeErr != nil && !errors.Is(closeErr, ErrClosed):
		return false, fmt.Errorf("Iter.Close: %w", closeErr)
	}
	stats.add(kind.name, !stopped, stopped, keys, held)
	return stopped, nil
}

func icStep(it *Iter, back bool) bool {
	if back {
		return it.Prev()
	}
	return it.Next()
}

func wantAt(want []string, i int) string {
	if i < len(want) {
		return want[i]
	}
	return "(none)"
}
