package kvbuf

// Docs as contract: one test (or a few) per testable claim of the exported
// names' doc comments, named after the name whose comment makes the claim.
// Randomized tests log their seed; replay with -kvbuf.seed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/storage"
)

// ---- Options ----

// TestOptionsEnsureDefaults: a nil *Options means defaults, a zero field
// that field's default, each as documented; set fields are kept; o is not
// changed (a copy is returned).
func TestOptionsEnsureDefaults(t *testing.T) {
	want := Options{
		FlushInterval:    time.Second,
		MaxPendingBytes:  64 << 20,
		PipelineDepth:    4,
		GroupWait:        flush.DefaultGroupWait,
		MaxKeySize:       4096,
		MaxValueSize:     1 << 20,
		MaxBits:          1 << 32,
		CacheSize:        8 << 20,
		PoolBytes:        8 << 20,
		IngestThreshold:  4 << 20,
		ReadTierBytes:    32 << 20,
		FlushQuantum:     200 * time.Microsecond,
		FlushCPUPercent:  100,
		WatchBufferBytes: DefaultWatchBufferBytes,
	}
	var nilOpts *Options
	if got := *nilOpts.EnsureDefaults(); got != want {
		t.Fatalf("nil.EnsureDefaults() = %+v, want %+v", got, want)
	}
	if got := *(&Options{}).EnsureDefaults(); got != want {
		t.Fatalf("zero EnsureDefaults() = %+v, want %+v", got, want)
	}
	// The names the comments give for the defaults.
	if want.FlushInterval != flush.DefaultInterval || want.MaxPendingBytes != flush.DefaultMaxPendingBytes ||
		want.PipelineDepth != flush.DefaultPipelineDepth || want.MaxKeySize != buffer.DefaultMaxKeySize ||
		want.MaxValueSize != buffer.DefaultMaxValueSize || want.MaxBits != buffer.DefaultMaxBits ||
		want.CacheSize != storage.DefaultCacheSize || want.PoolBytes != buffer.DefaultPoolBytes ||
		want.IngestThreshold != DefaultIngestThreshold || want.ReadTierBytes != DefaultReadTierBytes ||
		want.FlushQuantum != DefaultFlushQuantum {
		t.Fatal("a documented default differs from the constant the comment names")
	}
	set := &Options{FlushInterval: -1, MaxPendingBytes: -1, PipelineDepth: 1, GroupWait: -1, MaxKeySize: 8,
		MaxValueSize: 9, MaxBits: 10, CacheSize: 11, PoolBytes: -1, IngestThreshold: -1, ReadTierBytes: -1,
		FlushQuantum: -1, FlushCPUPercent: 50, WatchBufferBytes: 12}
	orig := *set
	got := set.EnsureDefaults()
	if *got != orig || *set != orig {
		t.Fatalf("EnsureDefaults changed set fields: %+v (input now %+v)", *got, *set)
	}
	if got == set {
		t.Fatal("EnsureDefaults returned its receiver, not a copy")
	}
	partial := &Options{MaxKeySize: 8}
	_ = partial.EnsureDefaults()
	if *partial != (Options{MaxKeySize: 8}) {
		t.Fatalf("EnsureDefaults changed its receiver: %+v", *partial)
	}
	for _, o := range []*Options{nil, {}, set, {PipelineDepth: 64}} {
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", o, err)
		}
	}
}

// TestOptionsMaxPendingBytes: sustained writes without Flush stay near the
// bound (a byte-triggered background flush makes room), and a negative
// bound disables both the bound and byte-triggered flushes.
func TestOptionsMaxPendingBytes(t *testing.T) {
	const bound = 256 << 10
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: bound})
	k := mustKV(t, db, "k")
	val := make([]byte, 100)
	peak := int64(0)
	for i := range 20_000 { // ~3 MiB of writes
		if err := k.Put(ctx, fmt.Appendf(nil, "%08d", i), val, 0); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, db.Metrics().PendingBytes)
	}
	m := db.Metrics()
	if m.Generations == 0 {
		t.Errorf("no background flush although writes exceeded the bound: %+v", m)
	}
	if peak > bound+64<<10 {
		t.Errorf("pending bytes peaked at %d, bound %d", peak, bound)
	}
	closeT(t, db)

	db = openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: -1})
	defer closeT(t, db)
	k = mustKV(t, db, "k")
	for i := range 20_000 {
		if err := k.Put(ctx, fmt.Appendf(nil, "%08d", i), val, 0); err != nil {
			t.Fatal(err)
		}
	}
	if m := db.Metrics(); m.Generations != 0 || m.Stalls != 0 || m.PendingBytes < 2<<20 {
		t.Errorf("MaxPendingBytes -1: generations %d, stalls %d, pending %d; want 0, 0, all of it", m.Generations, m.Stalls, m.PendingBytes)
	}
}

// TestOptionsFlushInterval: with an interval, pending changes become
// durable without a Flush call.
func TestOptionsFlushInterval(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: time.Millisecond})
	defer closeT(t, db)
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	if err := db.EndOp(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an interval flush to persist op 1", func() bool { return db.Watermark() == 1 })
	if m := db.Metrics(); m.Flushes != 0 || m.Generations == 0 {
		t.Fatalf("metrics %+v: want generations from the interval and no Flush call", m)
	}
}

// waitFor polls cond until it holds; the deadline only detects a hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOptionsPipelineDepth: MaxInFlight never exceeds PipelineDepth.
func TestOptionsPipelineDepth(t *testing.T) {
	for _, depth := range []int{1, 2} {
		db := openT(t, t.TempDir(), &Options{FlushInterval: -1, PipelineDepth: depth})
		k := mustKV(t, db, "k")
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					if err := k.Put(ctx, fmt.Appendf(nil, "%d-%d", g, i), []byte("v"), 0); err != nil {
						t.Error(err)
						return
					}
					if err := db.Flush(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		m := db.Metrics()
		closeT(t, db)
		if m.MaxInFlight < 1 || m.MaxInFlight > depth {
			t.Errorf("PipelineDepth %d: MaxInFlight %d", depth, m.MaxInFlight)
		}
	}
}

// ---- Open, DB ----

// TestOpenCreates: Open creates a missing directory (and its parents) or
// initialises an empty one; Dir returns the path given.
func TestOpenCreates(t *testing.T) {
	for _, dir := range []string{filepath.Join(t.TempDir(), "a", "b"), t.TempDir()} {
		db := openT(t, dir, nil)
		if db.Dir() != dir {
			t.Errorf("Dir() = %q, want %q", db.Dir(), dir)
		}
		if got := fmt.Sprint(db.Keyspaces(), db.Bitslices(), db.Watermark()); got != "[] [] 0" {
			t.Errorf("new engine: %s", got)
		}
		closeT(t, db)
		b, err := os.ReadFile(filepath.Join(dir, enginedir.ManifestName))
		if err != nil || string(b) != manifestReadyText {
			t.Errorf("manifest %q, %v", b, err)
		}
	}
}

// TestOpenFailureReleasesEverything: "On error every file Open opened is
// closed again": after a failed Open (found after the store and a
// bitslice were opened) the same directory opens at once once repaired.
func TestOpenFailureReleasesEverything(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, nil)
	mustBits(t, db, "a") // opened before "b" at the next Open
	closeT(t, db)
	path := bitsFile(dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, []byte("junk"))
	for range 3 {
		if _, err := Open(dir, nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	}
	writeFile(t, path, good)
	db = openT(t, dir, nil) // not ErrLocked: the store, bits/a and LOCK were released
	defer closeT(t, db)
	wantBit(t, mustBits(t, db, "b"), 3, true)
}

// TestKeyspacesAndBitslicesSorted: Keyspaces and Bitslices return the names
// sorted, whatever the creation order, also after a reopen.
func TestKeyspacesAndBitslicesSorted(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	names := []string{"zeta", "Alpha", "m.2", "m-1", "_x", "0", "m_3", "beta"}
	for _, n := range names {
		mustKV(t, db, n)
		mustBits(t, db, n)
	}
	want := slices.Sorted(slices.Values(names))
	check := func(when string) {
		t.Helper()
		if got := db.Keyspaces(); !slices.Equal(got, want) {
			t.Errorf("%s: Keyspaces = %v, want %v", when, got, want)
		}
		if got := db.Bitslices(); !slices.Equal(got, want) {
			t.Errorf("%s: Bitslices = %v, want %v", when, got, want)
		}
	}
	check("open")
	if m := db.Metrics(); m.Keyspaces != len(names) || m.Bitslices != len(names) {
		t.Errorf("Metrics counts %d keyspaces, %d bitslices", m.Keyspaces, m.Bitslices)
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	check("after reopen")
}

// TestDBBitsCreatesFileDurably: DB.Bits creates the file before it returns
// (a crash right after keeps the bitslice), and returns the same handle
// for the same name.
func TestDBBitsCreatesFileDurably(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	defer closeT(t, db)
	b := mustBits(t, db, "fresh")
	if b.Name() != "fresh" || mustBits(t, db, "fresh") != b {
		t.Fatal("Name or handle identity wrong")
	}
	if _, err := os.Stat(filepath.Join(dir, enginedir.BitsDir, "fresh"+enginedir.BitsExt)); err != nil {
		t.Fatalf("bitslice file after DB.Bits: %v", err)
	}
	crashed := filepath.Join(t.TempDir(), "c")
	if err := copyDir(dir, crashed); err != nil {
		t.Fatal(err)
	}
	c := openT(t, crashed, nil)
	defer closeT(t, c)
	if got := fmt.Sprint(c.Bitslices()); got != "[fresh]" {
		t.Fatalf("Bitslices after a crash = %s", got)
	}
}

// TestCloseIdempotentConcurrentObservable: Close from many goroutines,
// every call returns the same result; Done and Wait observe it from any
// number of goroutines; Wait does not start Close.
func TestCloseIdempotentConcurrentObservable(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := db.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an open engine: %v", err)
	}
	select {
	case <-db.Done():
		t.Fatal("Done closed before Close")
	default:
	}
	mustPut(t, mustKV(t, db, "k"), "b", "2", 2) // Wait did not start Close
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 16 {
		wg.Go(func() { <-db.Done(); errs <- nil })
		wg.Go(func() { errs <- db.Wait(ctx) })
	}
	for range 16 {
		wg.Go(func() { errs <- db.Close() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Close/Wait: %v", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close after Close: %v", err)
	}
	db = openT(t, db.Dir(), nil)
	defer closeT(t, db)
	wantGet(t, mustKV(t, db, "k"), "b", "2") // Close's final flush
}

// TestReadsRacingClose: a read overlapping Close returns the right value
// or ErrClosed, never torn data or a panic; a read that starts after Close
// has begun returns ErrClosed.
func TestReadsRacingClose(t *testing.T) {
	for round := range 10 {
		db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
		k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
		mustPut(t, k, "stored", "S", 1)
		mustSet(t, b, 5, true, 1)
		mustFlush(t, db)
		mustPut(t, k, "pending", "P", 2)
		mustSet(t, b, 70, true, 2)
		var wg sync.WaitGroup
		started := make(chan struct{}, 4)
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					if i == 5 {
						started <- struct{}{}
					}
					after := false // Close has begun before this read starts
					select {
					case <-db.Done():
						after = true
					default:
					}
					var err error
					var ok bool
					switch (g + i) % 4 {
					case 0:
						var v []byte
						v, err = k.Get([]byte("stored"))
						ok = string(v) == "S"
					case 1:
						var v []byte
						v, err = k.Get([]byte("pending"))
						ok = string(v) == "P"
					case 2:
						vals := make([]bool, 2)
						err = b.GetMany([]uint64{5, 70}, vals)
						ok = vals[0] && vals[1]
					case 3:
						got := []string{}
						var it *Iter
						it, err = k.NewIter(nil)
						if err == nil {
							for valid := it.First(); valid; valid = it.Next() {
								got = append(got, string(it.Key())+"="+string(it.Value()))
							}
							err = errors.Join(it.Error(), it.Close())
						}
						ok = fmt.Sprint(got) == "[pending=P stored=S]"
					}
					switch {
					case errors.Is(err, ErrClosed):
						return
					case err != nil:
						t.Errorf("round %d: read %d: %v", round, (g+i)%4, err)
						return
					case !ok:
						t.Errorf("round %d: read %d returned wrong data", round, (g+i)%4)
						return
					case after:
						t.Errorf("round %d: read %d started after Close began and succeeded", round, (g+i)%4)
						return
					}
				}
			})
		}
		for range 4 {
			<-started
		}
		closeT(t, db)
		wg.Wait()
	}
}

// ---- Metrics ----

// TestMetricsMoveAsDocumented: each field of Metrics moves as its comment
// says through writes, flushes, EndOp, snapshots and Close.
func TestMetricsMoveAsDocumented(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, PipelineDepth: 2})
	if m := db.Metrics(); m.PendingBytes != 0 || m.PendingKeys != 0 || m.Flushes != 0 || m.Generations != 0 ||
		m.HighestOp != 0 || m.Watermark != 0 || m.ReceiptLag != 0 || m.Keyspaces != 0 || m.LastError != nil {
		t.Fatalf("new engine: %+v", m)
	}
	k, k2, b := mustKV(t, db, "k"), mustKV(t, db, "k2"), mustBits(t, db, "b")
	mustPut(t, k, "a", "1", 3)
	mustPut(t, k, "b", "1", 4)
	mustPut(t, k, "a", "2", 5) // an overwrite of a pending key
	mustPut(t, k2, "a", "1", 6)
	mustSet(t, b, 100, true, 7)
	m := db.Metrics()
	if m.PendingBytes <= 0 || m.PendingKeys != 3 || m.HighestOp != 7 || m.Watermark != 0 || m.ReceiptLag != 7 {
		t.Fatalf("after writes: PendingBytes %d PendingKeys %d HighestOp %d Watermark %d ReceiptLag %d",
			m.PendingBytes, m.PendingKeys, m.HighestOp, m.Watermark, m.ReceiptLag)
	}
	if m.Keyspaces != 2 || m.Bitslices != 1 || m.Snapshots != 0 {
		t.Fatalf("counts: %+v", m)
	}
	mustFlush(t, db)
	m = db.Metrics()
	if m.PendingBytes != 0 || m.PendingKeys != 0 {
		t.Fatalf("after flush: PendingBytes %d PendingKeys %d", m.PendingBytes, m.PendingKeys)
	}
	if m.Flushes != 1 || m.Coalesced != 0 || m.Generations < 1 || m.GenerationWrites < m.Generations {
		t.Fatalf("after one flush: Flushes %d Coalesced %d Generations %d GenerationWrites %d", m.Flushes, m.Coalesced, m.Generations, m.GenerationWrites)
	}
	if m.Watermark != 6 || m.HighestOp != 7 || m.ReceiptLag != 1 {
		t.Fatalf("after flush: Watermark %d HighestOp %d ReceiptLag %d; want 6, 7, 1", m.Watermark, m.HighestOp, m.ReceiptLag)
	}
	if m.FlushLatency.Count != 1 || m.FlushLatency.Sum <= 0 || m.FlushLatency.Quantile(1) <= 0 {
		t.Fatalf("FlushLatency after one flush: count %d sum %v", m.FlushLatency.Count, m.FlushLatency.Sum)
	}
	if m.InFlight != 0 || m.MaxInFlight < 1 || m.MaxInFlight > 2 || m.Failures != 0 || m.LastError != nil || m.Stalls != 0 {
		t.Fatalf("after flush: %+v", m)
	}
	if err := db.EndOp(ctx, 7); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if m = db.Metrics(); m.Watermark != 7 || m.ReceiptLag != 0 || m.Flushes != 2 {
		t.Fatalf("after EndOp and flush: Watermark %d ReceiptLag %d Flushes %d", m.Watermark, m.ReceiptLag, m.Flushes)
	}
	gens := m.Generations
	mustFlush(t, db) // nothing to do: counted as a Flush, no generation
	if m = db.Metrics(); m.Flushes != 3 || m.Generations != gens || m.FlushLatency.Count != 3 {
		t.Fatalf("idle flush: Flushes %d Generations %d (was %d) latency count %d", m.Flushes, m.Generations, gens, m.FlushLatency.Count)
	}
	s1, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if m = db.Metrics(); m.Snapshots != 2 {
		t.Fatalf("Snapshots = %d, want 2", m.Snapshots)
	}
	s1.Close()
	s1.Close()
	if m = db.Metrics(); m.Snapshots != 1 {
		t.Fatalf("Snapshots after Close = %d, want 1", m.Snapshots)
	}
	if err := db.DropKV(ctx, "k2", 8); err != nil {
		t.Fatal(err)
	}
	if m = db.Metrics(); m.Keyspaces != 1 || m.HighestOp != 8 {
		t.Fatalf("after DropKV: Keyspaces %d HighestOp %d", m.Keyspaces, m.HighestOp)
	}
	// Op 0 is not tracked: it moves nothing op-related.
	mustPut(t, k, "c", "1", 0)
	if m = db.Metrics(); m.HighestOp != 8 {
		t.Fatalf("op 0 moved HighestOp to %d", m.HighestOp)
	}
	_ = s2
	closeT(t, db) // closes s2
	after := db.Metrics()
	if after.Snapshots != 0 || after.PendingBytes != 0 || after.Watermark != 7 || after.StoreJobs != 0 {
		t.Fatalf("after Close: %+v", after)
	}
	if again := db.Metrics(); fmt.Sprint(again) != fmt.Sprint(after) {
		t.Fatalf("counters moved after Close:\n%+v\n%+v", after, again)
	}
	_ = db.Flush(ctx) // refused: counts nothing
	if again := db.Metrics(); again.Flushes != after.Flushes {
		t.Fatalf("a refused Flush was counted: %d, was %d", again.Flushes, after.Flushes)
	}
}

// stallFS is a store file system whose next WAL write, once armed, blocks
// until released: a flush frozen into it stays in flight.
type stallFS struct {
	armed    atomic.Bool
	stalled  chan struct{}
	released chan struct{}
}

func newStallFS() (*stallFS, vfs.FS) {
	return newStallFSOn(errorfs.OpFileWrite, errorfs.OpFileWriteAt)
}

// newStallFSOn is newStallFS for the next WAL operation of one of kinds
// (a sync, say: a generation written but not durable).
func newStallFSOn(kinds ...errorfs.OpKind) (*stallFS, vfs.FS) {
	s := &stallFS{stalled: make(chan struct{}, 1), released: make(chan struct{})}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if slices.Contains(kinds, op.Kind) && strings.HasSuffix(op.Path, ".log") &&
			s.armed.CompareAndSwap(true, false) {
			s.stalled <- struct{}{}
			<-s.released
		}
		return nil
	})
	return s, reuseWrapFS{errorfs.Wrap(vfs.NewMem(), inj)}
}

// reuseWrapFS makes pebble's recycled WAL files go through the wrapped FS:
// errorfs.FS.ReuseForWrite returns the inner file unwrapped, so an
// injector would never see the writes to a recycled log.
type reuseWrapFS struct{ vfs.FS }

func (f reuseWrapFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := f.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return f.OpenReadWrite(newname, category)
}

// stall starts a Flush that freezes everything pending and blocks in the
// WAL operation s stalls (a write, or what newStallFSOn names); it
// returns that Flush's result channel.
func (s *stallFS) stall(t testing.TB, db *DB) <-chan error {
	t.Helper()
	s.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- db.Flush(ctx) }()
	select {
	case <-s.stalled:
	case err := <-done:
		t.Fatalf("the flush finished without reaching the stalled WAL operation: %v", err)
	case <-time.After(hangTimeout):
		t.Fatal("the flush neither stalled nor finished") // a hang detector
	}
	return done
}

// hangTimeout bounds waits that only end if the engine works: a hang
// detector, not a timing assertion.
const hangTimeout = 30 * time.Second

// waitStalled waits for the armed stall to be hit.
func (s *stallFS) waitStalled(t testing.TB) {
	t.Helper()
	select {
	case <-s.stalled:
	case <-time.After(hangTimeout):
		t.Fatal("no WAL write stalled") // a hang detector
	}
}

func (s *stallFS) release() { s.released <- struct{}{} }

// TestFlushContextAndCoalescing: Flush returns ctx.Err() when ctx ends
// first and the flush goes on; callers that arrive while a generation is
// in flight share the next one (Coalesced); Flush covers only writes
// completed before it.
func TestFlushContextAndCoalescing(t *testing.T) {
	sfs, fsys := newStallFS()
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, GroupWait: -1, storeFS: fsys})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 1)
	first := sfs.stall(t, db) // generation 1 holds op 1's write, in flight
	mustPut(t, k, "b", "2", 2)
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if err := db.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with a context that ends first: %v", err)
	}
	if m := db.Metrics(); m.InFlight != 1 || m.Watermark != 0 || db.InFlight() != 1 {
		t.Fatalf("during the stall: InFlight %d (DB.InFlight %d) Watermark %d", m.InFlight, db.InFlight(), m.Watermark)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = db.Flush(ctx) })
	}
	waitFor(t, "the Flush callers to be admitted", func() bool { return db.Metrics().Flushes == 6 })
	sfs.release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m := db.Metrics()
	if m.Coalesced < 3 {
		t.Errorf("Coalesced = %d: 4 (or 5) callers waiting for one generation should share it", m.Coalesced)
	}
	if m.Watermark != 1 {
		t.Errorf("Watermark %d, want 1", m.Watermark)
	}
	if m.MaxInFlight > 4 {
		t.Errorf("MaxInFlight %d above the default PipelineDepth", m.MaxInFlight)
	}
}

// TestBackpressureWaitsAndHonoursContext: a write that finds pending
// memory over the bound waits for a flush (counted in Stalls, StallTime)
// and returns ctx.Err() if its context ends first; nothing of it is
// applied.
func TestBackpressureWaitsAndHonoursContext(t *testing.T) {
	sfs, fsys := newStallFS()
	const bound = 64 << 10
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: bound, storeFS: fsys})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	val := make([]byte, 1000)
	i := 0
	for db.Metrics().PendingBytes <= bound/2 {
		i++
		if err := k.Put(ctx, fmt.Appendf(nil, "%06d", i), val, 0); err != nil {
			t.Fatal(err)
		}
	}
	flushed := sfs.stall(t, db)
	for db.Metrics().PendingBytes <= bound { // frozen but not released: still pending
		i++
		if err := k.Put(ctx, fmt.Appendf(nil, "%06d", i), val, 0); err != nil {
			t.Fatal(err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := k.Put(cancelled, []byte("late"), []byte("x"), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put over the bound with a cancelled context: %v", err)
	}
	wantGet(t, k, "late", "")
	if m := db.Metrics(); m.Stalls != 0 {
		// The context is checked before admission: no wait at all.
		t.Errorf("Stalls = %d after a write with a cancelled context, want 0", m.Stalls)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- k.Put(ctx, []byte("late"), []byte("y"), 0) }()
	waitFor(t, "the write to stall", func() bool { return db.Metrics().Stalls == 1 })
	select {
	case err := <-waiting:
		t.Fatalf("a write over the bound returned (%v) while the flush was stalled", err)
	default:
	}
	sfs.release()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "late", "y")
	if m := db.Metrics(); m.StallTime <= 0 {
		t.Fatalf("StallTime = %v after a stall", m.StallTime)
	}
}

// ---- ops and the watermark ----

// TestEndOpLetsWatermarkCoverLastOp: the last op of single calls is covered
// only once EndOp (or a later op) says it is complete; a Batch needs no
// EndOp; EndOp of an op never begun is ErrBadOp, and an empty batch is an
// op without writes; ErrClosed after Close.
func TestEndOpLetsWatermarkCoverLastOp(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 5)
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 4 {
		t.Fatalf("watermark %d, want 4: op 5 may get more writes", wm)
	}
	mustPut(t, k, "b", "1", 5) // op 5 still open: not stale
	if err := db.EndOp(ctx, 5); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 5 {
		t.Fatalf("watermark %d after EndOp(5), want 5", wm)
	}
	if err := k.Put(ctx, []byte("c"), nil, 5); err != nil {
		t.Fatalf("write of op 5 after its EndOp was flushed: %v, want nil (a redelivered op)", err)
	}
	wantGet(t, k, "c", "") // skipped
	if err := db.Update(ctx, 6, func(b *Batch) error { b.Put(k, []byte("c"), []byte("6")); return nil }); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 6 {
		t.Fatalf("watermark %d after batch op 6, want 6", wm)
	}
	if err := db.EndOp(ctx, 9); !errors.Is(err, ErrBadOp) { // never begun: a typo
		t.Fatalf("EndOp of op 9, never begun: %v, want ErrBadOp", err)
	}
	if err := db.Apply(ctx, db.NewBatch(), 9); err != nil { // ops 7 and 8 had no writes, nor has 9
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 9 {
		t.Fatalf("watermark %d after EndOp(9), want 9", wm)
	}
	if err := db.EndOp(ctx, 3); err != nil { // already covered: a no-op
		t.Fatal(err)
	}
	closeT(t, db)
	if err := db.EndOp(ctx, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("EndOp after Close: %v", err)
	}
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 9 {
		t.Fatalf("watermark after reopen %d, want 9", wm)
	}
	if err := mustKV(t, db, "k").Put(ctx, []byte("d"), nil, 9); err != nil {
		t.Fatalf("write of op 9 after reopen: %v, want nil (a redelivered op)", err)
	}
	wantGet(t, mustKV(t, db, "k"), "d", "")
}

// TestWatermarkOnlyCoversFinishedOps: a host that finishes op n before
// starting op n+1 (ops of one to four single writes, or batches, some
// closed by EndOp) while another goroutine flushes at random never gets
// ErrStaleOp, and every watermark it observes covers only ops whose
// writes had all returned. After the last EndOp the watermark covers
// everything, also after a reopen.
func TestWatermarkOnlyCoversFinishedOps(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: time.Millisecond, PipelineDepth: 1 + rng.IntN(4)})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	var finished atomic.Uint64 // the host's last op whose writes all returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var observed atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := db.Flush(ctx); err != nil {
					t.Error(err)
					return
				}
				wm := db.Watermark()
				if f := finished.Load(); wm > f {
					t.Errorf("seed %d: watermark %d covers op %d, whose writes had not all returned (finished %d)", seed, wm, wm, f)
					return
				}
				observed.Add(1)
			}
		})
	}
	ops := 1500
	if testing.Short() {
		ops = 300
	}
	model := map[string]string{}
	bits := map[uint64]bool{}
	for op := uint64(1); op <= uint64(ops); op++ {
		switch rng.IntN(5) {
		case 0:
			key := fmt.Sprintf("b%03d", rng.IntN(100))
			err := db.Update(ctx, op, func(bt *Batch) error {
				bt.Put(k, []byte(key), fmt.Appendf(nil, "%d", op))
				bt.Set(b, op, true)
				return nil
			})
			if err != nil {
				t.Fatalf("seed %d: op %d: %v", seed, op, err)
			}
			model[key], bits[op] = fmt.Sprint(op), true
		default:
			for w := range 1 + rng.IntN(4) {
				var err error
				if w%2 == 0 {
					key := fmt.Sprintf("s%03d", rng.IntN(100))
					err = k.Put(ctx, []byte(key), fmt.Appendf(nil, "%d.%d", op, w), op)
					model[key] = fmt.Sprintf("%d.%d", op, w)
				} else {
					err = b.Set(ctx, op*8+uint64(w), true, op)
					bits[op*8+uint64(w)] = true
				}
				if err != nil {
					t.Fatalf("seed %d: op %d write %d: %v", seed, op, w, err)
				}
			}
			if rng.IntN(4) == 0 {
				if err := db.EndOp(ctx, op); err != nil {
					t.Fatal(err)
				}
			}
		}
		finished.Store(op)
	}
	close(stop)
	wg.Wait()
	if err := db.EndOp(ctx, uint64(ops)); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != uint64(ops) {
		t.Fatalf("seed %d: watermark %d after the last EndOp, want %d", seed, wm, ops)
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != uint64(ops) {
		t.Fatalf("seed %d: watermark after reopen %d, want %d", seed, wm, ops)
	}
	k, b = mustKV(t, db, "k"), mustBits(t, db, "b")
	for key, v := range model {
		wantGet(t, k, key, v)
	}
	for i := range bits {
		wantBit(t, b, i, true)
	}
	if c, _ := b.Count(); c != uint64(len(bits)) {
		t.Fatalf("Count %d, want %d", c, len(bits))
	}
	t.Logf("%d watermarks observed", observed.Load())
}

// ---- KV ----

// kvUniverse is a set of keys with shared prefixes and edge bytes, for
// model checks of reads, scans and bounds.
var kvUniverse = func() []string {
	alpha := []string{"\x00", "a", "b", "c", "\xff"}
	var out []string
	var gen func(p string, n int)
	gen = func(p string, n int) {
		if p != "" {
			out = append(out, p)
		}
		if n == 0 {
			return
		}
		for _, c := range alpha {
			gen(p+c, n-1)
		}
	}
	gen("", 3)
	slices.Sort(out)
	return out
}()

// kvModel is the expected content of one keyspace.
type kvModel map[string]string

func randKey(rng *rand.Rand) string { return kvUniverse[rng.IntN(len(kvUniverse))] }

// randBound returns nil (open) or a key of the universe, or (rarely) one
// outside it.
func randBound(rng *rand.Rand) []byte {
	switch rng.IntN(6) {
	case 0:
		return nil
	case 1:
		return []byte("bb\x01")
	}
	return []byte(randKey(rng))
}

// kvOp applies one random change to k and m: a put, a delete or a range
// delete.
func kvOp(t testing.TB, rng *rand.Rand, k *KV, m kvModel, op uint64) {
	t.Helper()
	switch p := rng.IntN(10); {
	case p < 6:
		key, v := randKey(rng), fmt.Sprintf("v%d", op)
		if rng.IntN(8) == 0 {
			v = "" // an empty value is a value
		}
		mustPut(t, k, key, v, op)
		m[key] = v
	case p < 9:
		key := randKey(rng)
		if err := k.Delete(ctx, []byte(key), op); err != nil {
			t.Fatal(err)
		}
		delete(m, key)
	default:
		lo, hi := randBound(rng), randBound(rng)
		if lo != nil && hi != nil && string(lo) > string(hi) {
			lo, hi = hi, lo
		}
		if err := k.DeleteRange(ctx, lo, hi, op); err != nil {
			t.Fatal(err)
		}
		for key := range m {
			if (lo == nil || key >= string(lo)) && (hi == nil || key < string(hi)) {
				delete(m, key)
			}
		}
	}
}

// modelScan returns the model's keys within o's bounds, sorted.
func modelScan(m kvModel, o *IterOptions) []string {
	var lo, hi []byte
	var prefix []byte
	if o != nil {
		lo, hi, prefix = o.LowerBound, o.UpperBound, o.Prefix
	}
	var out []string
	for _, key := range slices.Sorted(maps.Keys(m)) {
		if (lo == nil || key >= string(lo)) && (hi == nil || key < string(hi)) &&
			(prefix == nil || strings.HasPrefix(key, string(prefix))) {
			out = append(out, key)
		}
	}
	return out
}

// kvReader is what KV and SnapshotKV have in common.
type kvReader interface {
	Get(key []byte) ([]byte, error)
	GetAppend(dst, key []byte) ([]byte, error)
	GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error)
	NewIter(o *IterOptions) (*Iter, error)
}

// checkKV compares every read of r with the model m: Get and GetAppend of
// every key of the universe, GetMany of random key lists against a loop of
// Get, and random iterator walks with random bounds.
func checkKV(t testing.TB, rng *rand.Rand, r kvReader, m kvModel, where string) {
	t.Helper()
	for _, key := range kvUniverse {
		v, err := r.Get([]byte(key))
		want, ok := m[key]
		if ok && (err != nil || string(v) != want) || !ok && !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: Get(%q) = %q, %v; want %q (present %v)", where, key, v, err, want, ok)
		}
		dst := []byte("prefix")
		got, err := r.GetAppend(dst, []byte(key))
		if ok && (err != nil || string(got) != "prefix"+want) || !ok && (!errors.Is(err, ErrNotFound) || string(got) != "prefix") {
			t.Fatalf("%s: GetAppend(%q) = %q, %v", where, key, got, err)
		}
	}
	for range 5 {
		keys := make([][]byte, rng.IntN(70)) // more than one internal pass of 32
		for i := range keys {
			keys[i] = []byte(randKey(rng))
		}
		vals := make([][]byte, len(keys)+rng.IntN(2))
		for i := range vals {
			vals[i] = []byte("stale")
		}
		roomy := rng.IntN(2) == 0
		buf := make([]byte, 0, rng.IntN(64))
		if roomy {
			buf = make([]byte, 3, 1<<14) // enough capacity: one array
			copy(buf, "pre")
		}
		buf0 := buf
		out, err := r.GetMany(keys, vals, buf)
		if err != nil {
			t.Fatalf("%s: GetMany: %v", where, err)
		}
		for i, key := range keys {
			v, gerr := r.Get(key)
			switch {
			case errors.Is(gerr, ErrNotFound):
				if vals[i] != nil {
					t.Fatalf("%s: GetMany[%d] (%q) = %q, Get says not found", where, i, key, vals[i])
				}
			case gerr != nil:
				t.Fatal(gerr)
			case vals[i] == nil || !bytes.Equal(vals[i], v):
				t.Fatalf("%s: GetMany[%d] (%q) = %q (nil %v), Get = %q", where, i, key, vals[i], vals[i] == nil, v)
			}
			if roomy && len(vals[i]) > 0 && !within(out, vals[i]) {
				t.Fatalf("%s: GetMany[%d] is not a subslice of the returned buffer", where, i)
			}
		}
		if len(out) < len(buf0) || !bytes.Equal(out[:len(buf0)], buf0) {
			t.Fatalf("%s: GetMany did not append to buf", where)
		}
	}
	for range 20 {
		o := &IterOptions{LowerBound: randBound(rng), UpperBound: randBound(rng)}
		if rng.IntN(3) == 0 {
			o.Prefix = []byte(randKey(rng))[:1+rng.IntN(2)]
			if len(o.Prefix) > 2 {
				o.Prefix = o.Prefix[:2]
			}
		}
		if o.LowerBound != nil && o.UpperBound != nil && string(o.LowerBound) > string(o.UpperBound) {
			o.LowerBound, o.UpperBound = o.UpperBound, o.LowerBound
		}
		walkIter(t, rng, r, m, o, where)
	}
}

// within reports whether sub lies inside buf[:len(buf)].
func within(buf, sub []byte) bool {
	for i := range buf {
		if &buf[i] == &sub[0] {
			return i+len(sub) <= len(buf)
		}
	}
	return false
}

// walkIter checks a full forward and reverse scan of r within o, then a
// random walk of positioning calls, against the model.
func walkIter(t testing.TB, rng *rand.Rand, r kvReader, m kvModel, o *IterOptions, where string) {
	t.Helper()
	keys := modelScan(m, o)
	var want, wantRev []string
	for _, key := range keys {
		want = append(want, key+"="+m[key])
	}
	wantRev = slices.Clone(want)
	slices.Reverse(wantRev)
	if got := scan(t, r, o); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: scan of %q = %q, want %q", where, *o, got, want)
	}
	if got := scanReverse(t, r, o); !slices.Equal(got, wantRev) && !(len(got) == 0 && len(wantRev) == 0) {
		t.Fatalf("%s: reverse scan of %q = %q, want %q", where, *o, got, wantRev)
	}
	it, err := r.NewIter(o)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	pos := -1 // index into keys; -1 or len(keys): not positioned
	var trail []string
	for range 30 {
		var ok bool
		var call string
		switch c := rng.IntN(8); {
		case c == 0 || pos < 0 || pos >= len(keys):
			switch rng.IntN(4) {
			case 0:
				call, ok = "First", it.First()
				pos = 0
			case 1:
				call, ok = "Last", it.Last()
				pos = len(keys) - 1
			case 2:
				key := randKey(rng)
				call, ok = fmt.Sprintf("SeekGE(%q)", key), it.SeekGE([]byte(key))
				pos, _ = slices.BinarySearch(keys, key)
			case 3:
				key := randKey(rng)
				call, ok = fmt.Sprintf("SeekLT(%q)", key), it.SeekLT([]byte(key))
				i, _ := slices.BinarySearch(keys, key)
				pos = i - 1
			}
		case c < 5:
			call, ok = "Next", it.Next()
			pos++
		default:
			call, ok = "Prev", it.Prev()
			pos--
		}
		trail = append(trail, call)
		wantOK := pos >= 0 && pos < len(keys)
		if ok != wantOK || it.Valid() != wantOK {
			t.Fatalf("%s: bounds %q: %v: returned %v, Valid %v, want %v (key %q)", where, *o, trail, ok, it.Valid(), wantOK, it.Key())
		}
		if wantOK && (string(it.Key()) != keys[pos] || string(it.Value()) != m[keys[pos]]) {
			t.Fatalf("%s: bounds %q: %v: at %q=%q, want %q=%q", where, *o, trail, it.Key(), it.Value(), keys[pos], m[keys[pos]])
		}
		if !wantOK && (it.Key() != nil || it.Value() != nil) {
			t.Fatalf("%s: %v: not positioned but Key %q Value %q", where, trail, it.Key(), it.Value())
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}

// TestKVReadsMatchModel is the read contract of a keyspace as a property:
// after random puts, deletes and range deletes spread over pending tables,
// sealed tables (snapshots seal them), flushed generations and reopens,
// Get, GetAppend, GetMany (exactly what a loop of Get returns), and
// iterators in both directions with SeekGE, SeekLT and random bounds and
// prefixes all agree with a model. Snapshots taken on the way keep reading
// their instant.
func TestKVReadsMatchModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	opts := &Options{FlushInterval: -1, MaxValueSize: 64}
	db := openT(t, dir, opts)
	defer func() { closeT(t, db) }()
	k := mustKV(t, db, "k")
	other := mustKV(t, db, "other") // must never show in k
	m := kvModel{}
	type snapAt struct {
		s *Snapshot
		m kvModel
	}
	var snaps []snapAt
	op := uint64(0)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	for r := range rounds {
		for range 20 + rng.IntN(60) {
			op++
			kvOp(t, rng, k, m, op)
			if rng.IntN(4) == 0 {
				mustPut(t, other, randKey(rng), "other", op)
			}
			if rng.IntN(40) == 0 {
				s, err := db.NewSnapshot()
				if err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, snapAt{s, maps.Clone(m)})
			}
			if rng.IntN(50) == 0 {
				mustFlush(t, db)
			}
		}
		where := fmt.Sprintf("seed %d round %d", seed, r)
		checkKV(t, rng, k, m, where)
		for i, s := range snaps {
			sk, err := s.s.KV("k")
			if err != nil {
				t.Fatal(err)
			}
			checkKV(t, rng, sk, s.m, fmt.Sprintf("%s snapshot %d", where, i))
		}
		switch rng.IntN(4) {
		case 0:
			mustFlush(t, db)
		case 1:
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			closeT(t, db)
			db = openT(t, dir, opts)
			k, other = mustKV(t, db, "k"), mustKV(t, db, "other")
		}
	}
	for _, s := range snaps {
		s.s.Close()
	}
}

// TestKVPutGetCopy: Put copies key and value; Get returns a copy (changing
// it changes nothing); an empty value is a value, not a deletion.
func TestKVPutGetCopy(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	key, val := []byte("key"), []byte("value")
	if err := k.Put(ctx, key, val, 0); err != nil {
		t.Fatal(err)
	}
	key[0], val[0] = 'X', 'X'
	wantGet(t, k, "key", "value")
	for _, flushed := range []bool{false, true} {
		v, err := k.Get([]byte("key"))
		if err != nil {
			t.Fatal(err)
		}
		v[0] = 'Y'
		wantGet(t, k, "key", "value")
		vals := make([][]byte, 1)
		if _, err := k.GetMany([][]byte{[]byte("key")}, vals, nil); err != nil {
			t.Fatal(err)
		}
		vals[0][0] = 'Z'
		wantGet(t, k, "key", "value")
		if !flushed {
			mustFlush(t, db)
		}
	}
	mustPut(t, k, "empty", "", 0)
	if v, err := k.Get([]byte("empty")); err != nil || len(v) != 0 {
		t.Fatalf("Get of an empty value = %q, %v", v, err)
	}
	mustFlush(t, db)
	if v, err := k.Get([]byte("empty")); err != nil || len(v) != 0 {
		t.Fatalf("Get of a flushed empty value = %q, %v", v, err)
	}
	if err := k.Delete(ctx, []byte("absent"), 0); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
}

// TestGetManyEmptyValueIsNotAbsent: GetMany sets vals[i] to nil only for
// a key that is absent or deleted; a key whose value is empty gets an
// empty, non-nil slice (as Get returns), whatever buf is, pending or
// stored. (With a nil buf the engine returns nil for an empty value:
// buffer.getMany slices buf[start:len(buf)] of a nil buf.)
func TestGetManyEmptyValueIsNotAbsent(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	mustPut(t, k, "stored-empty", "", 0)
	mustFlush(t, db)
	mustPut(t, k, "pending-empty", "", 0)
	if v, err := k.Get([]byte("pending-empty")); err != nil || v == nil {
		t.Fatalf("Get of an empty value = %v (nil %v), %v", v, v == nil, err)
	}
	keys := [][]byte{[]byte("pending-empty"), []byte("stored-empty"), []byte("absent")}
	for _, buf := range [][]byte{nil, {}, make([]byte, 0, 64), []byte("x")} {
		vals := make([][]byte, len(keys))
		if _, err := k.GetMany(keys, vals, buf); err != nil {
			t.Fatal(err)
		}
		if vals[0] == nil || vals[1] == nil || vals[2] != nil {
			t.Errorf("GetMany with buf %q (nil %v): nil values: pending-empty %v, stored-empty %v, absent %v; want false, false, true",
				buf, buf == nil, vals[0] == nil, vals[1] == nil, vals[2] == nil)
		}
	}
}

// TestGetAppendAndGetManyAllocateNothing: with enough capacity in dst (or
// buf), GetAppend and GetMany allocate nothing, for pending and stored
// keys alike.
func TestGetAppendAndGetManyAllocateNothing(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector makes sync.Pool drop items at random: allocation counts are meaningless")
	}
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	mustPut(t, k, "stored", "S", 0)
	mustFlush(t, db)
	mustPut(t, k, "pending", "P", 0)
	dst := make([]byte, 0, 64)
	keys := [][]byte{[]byte("stored"), []byte("pending"), []byte("absent")}
	vals := make([][]byte, 3)
	for _, key := range []string{"pending", "stored"} {
		kb := []byte(key)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := k.GetAppend(dst[:0], kb); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("GetAppend of a %s key: %v allocations", key, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := k.GetMany(keys, vals, dst[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("GetMany: %v allocations", n)
	}
	idx, out := []uint64{1, 2, 3}, make([]bool, 3)
	b := mustBits(t, db, "b")
	if n := testing.AllocsPerRun(100, func() { _ = b.GetMany(idx, out) }); n != 0 {
		t.Errorf("Bits.GetMany: %v allocations", n)
	}
}

// TestIterSeesPendingLiveStoreFixed: the iterator sees changes completed
// before NewIter, and a flush during the scan changes nothing it returns
// (the tables it read are pinned).
func TestIterSeesPendingLiveStoreFixed(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	var want []string
	for i := range 200 {
		key := fmt.Sprintf("%03d", i)
		mustPut(t, k, key, "v"+key, 0)
		want = append(want, key+"=v"+key)
	}
	mustFlush(t, db)
	for i := 0; i < 200; i += 2 { // pending overwrites of half the stored keys
		key := fmt.Sprintf("%03d", i)
		mustPut(t, k, key, "p"+key, 0)
		want[i] = key + "=p" + key
	}
	it, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
		if len(got) == 50 {
			mustFlush(t, db) // moves the pending overwrites to the store
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("scan across a flush differs from the data:\n got %v\nwant %v", got, want)
	}
	// Reverse, across another flush of new overwrites.
	for i := 1; i < 200; i += 2 {
		key := fmt.Sprintf("%03d", i)
		mustPut(t, k, key, "q"+key, 0)
		want[i] = key + "=q" + key
	}
	it2, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	got = got[:0]
	for ok := it2.Last(); ok; ok = it2.Prev() {
		got = append(got, string(it2.Key())+"="+string(it2.Value()))
		if len(got) == 50 {
			mustFlush(t, db)
		}
	}
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Fatalf("reverse scan across a flush differs:\n got %v\nwant %v", got, want)
	}
}

// TestIterOptionsPrefix: Prefix limits the scan to keys that start with
// it, intersected with the bounds, including prefixes ending in 0xff and
// an all-0xff prefix (no successor).
func TestIterOptionsPrefix(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	keys := []string{"a", "ab", "ab\xff", "ab\xff\x00", "ac", "b", "\xff", "\xff\xff", "\xff\xff\x00", "\xff\xfe"}
	for i, key := range keys {
		mustPut(t, k, key, "v", uint64(i+1))
		if i == 4 {
			mustFlush(t, db)
		}
	}
	m := kvModel{}
	for _, key := range keys {
		m[key] = "v"
	}
	for _, o := range []*IterOptions{
		nil,
		{Prefix: []byte("a")},
		{Prefix: []byte("ab")},
		{Prefix: []byte("ab\xff")},
		{Prefix: []byte("\xff")},
		{Prefix: []byte("\xff\xff")},
		{Prefix: []byte{}},
		{Prefix: []byte("a"), LowerBound: []byte("ab\xff")},
		{Prefix: []byte("a"), UpperBound: []byte("ab\xff")},
		{Prefix: []byte("ab"), LowerBound: []byte("a"), UpperBound: []byte("z")},
		{LowerBound: []byte("ab"), UpperBound: []byte("b")},
		{LowerBound: []byte{}, UpperBound: []byte("ab")},
	} {
		var want []string
		for _, key := range modelScan(m, o) {
			want = append(want, key+"=v")
		}
		if got := scan(t, k, o); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Errorf("scan %+q = %q, want %q", o, got, want)
		}
		rev := slices.Clone(want)
		slices.Reverse(rev)
		if got := scanReverse(t, k, o); !slices.Equal(got, rev) && len(got)+len(rev) > 0 {
			t.Errorf("reverse scan %+q = %q, want %q", o, got, rev)
		}
	}
}

// TestIterInvertedBoundsWithPrefix documents what NewIter does with
// LowerBound > UpperBound when a Prefix is also given: the comment says
// ErrBadRange for lower > upper; with a Prefix the engine intersects
// first. Either an ErrBadRange or an empty iterator is acceptable; a
// panic (pebble's bound check) or keys are not.
func TestIterInvertedBoundsWithPrefix(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	mustPut(t, k, "m1", "v", 0)
	it, err := k.NewIter(&IterOptions{LowerBound: []byte("z"), UpperBound: []byte("a"), Prefix: []byte("m")})
	if err != nil {
		if !errors.Is(err, ErrBadRange) {
			t.Fatalf("NewIter: %v", err)
		}
		return
	}
	defer it.Close()
	if it.First() || it.Last() {
		t.Fatalf("inverted bounds with a prefix found %q", it.Key())
	}
}

// ---- DropKV ----

// TestDropKV: handles of a dropped keyspace fail with ErrDropped; DB.KV of
// the name then gives a new, empty keyspace (no pending, stored or
// range-deleted key comes back), also after a flush, a reopen, and a crash
// after the drop was flushed; dropping an unknown keyspace is no error; a
// snapshot taken before the drop still reads the old keys.
func TestDropKV(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	old := mustKV(t, db, "ks")
	keep := mustKV(t, db, "keep")
	mustPut(t, old, "stored", "1", 1)
	mustPut(t, keep, "stored", "keep", 1)
	mustFlush(t, db)
	mustPut(t, old, "pending", "2", 2)
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := db.DropKV(ctx, "ks", 3); err != nil {
		t.Fatal(err)
	}
	if err := db.DropKV(ctx, "ks", 4); err != nil { // again: no such keyspace now
		t.Fatal(err)
	}
	if err := db.DropKV(ctx, "never", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Get([]byte("stored")); !errors.Is(err, ErrDropped) {
		t.Fatalf("Get through a dropped handle: %v", err)
	}
	if got := fmt.Sprint(db.Keyspaces()); got != "[keep]" {
		t.Fatalf("Keyspaces after DropKV = %s", got)
	}
	sk, err := snap.KV("ks")
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, sk, "stored", "1")
	wantGet(t, sk, "pending", "2")

	check := func(when string, db *DB) *KV {
		t.Helper()
		nk := mustKV(t, db, "ks")
		if got := scan(t, nk, nil); len(got) != 0 {
			t.Fatalf("%s: the new keyspace holds %v", when, got)
		}
		wantGet(t, nk, "stored", "")
		wantGet(t, nk, "pending", "")
		wantGet(t, mustKV(t, db, "keep"), "stored", "keep")
		return nk
	}
	nk := check("pending drop", db)
	if nk == old {
		t.Fatal("KV after DropKV returned the dropped handle")
	}
	mustPut(t, nk, "new", "3", 5)
	mustFlush(t, db)
	check2 := func(when string, db *DB) {
		t.Helper()
		k := mustKV(t, db, "ks")
		if got := fmt.Sprint(scan(t, k, nil)); got != "[new=3]" {
			t.Fatalf("%s: keyspace ks = %s, want [new=3]", when, got)
		}
	}
	check2("after flush", db)
	crashed := filepath.Join(t.TempDir(), "crash")
	if err := copyDir(dir, crashed); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	closeT(t, db)
	for _, d := range []string{dir, crashed} {
		db = openT(t, d, nil)
		check2("after reopen of "+filepath.Base(d), db)
		if got := fmt.Sprint(db.Keyspaces()); got != "[keep ks]" {
			t.Fatalf("Keyspaces after reopen = %s", got)
		}
		// Dropping and recreating again, across a reopen without a flush.
		if err := db.DropKV(ctx, "ks", 10); err != nil {
			t.Fatal(err)
		}
		closeT(t, db)
		db = openT(t, d, nil)
		if got := fmt.Sprint(db.Keyspaces()); got != "[keep]" {
			t.Fatalf("Keyspaces after a drop and a reopen = %s, want [keep]", got)
		}
		check("after drop and reopen", db)
		closeT(t, db)
	}
}

// ---- Bits ----

// bitsModel is the expected content of one bitslice.
type bitsModel struct {
	bits []bool // index -> value, grown as needed
	n    int    // set bits
	hi   uint64 // highest index written + 1
}

func newBitsModel() *bitsModel { return &bitsModel{} }

func (m *bitsModel) get(i uint64) bool { return i < uint64(len(m.bits)) && m.bits[i] }

func (m *bitsModel) apply(lo, hi uint64, v bool) {
	if hi > uint64(len(m.bits)) {
		m.bits = append(m.bits, make([]bool, hi-uint64(len(m.bits)))...)
	}
	for i := lo; i < hi; i++ {
		if m.bits[i] != v {
			m.bits[i] = v
			if v {
				m.n++
			} else {
				m.n--
			}
		}
	}
	m.hi = max(m.hi, hi)
}

func (m *bitsModel) clone() *bitsModel {
	return &bitsModel{bits: slices.Clone(m.bits), n: m.n, hi: m.hi}
}

// ones returns the set bits at or after from.
func (m *bitsModel) ones(from uint64) []uint64 {
	var out []uint64
	for i := from; i < uint64(len(m.bits)); i++ {
		if m.bits[i] {
			out = append(out, i)
		}
	}
	return out
}

// bitsReader is what Bits and SnapshotBits have in common.
type bitsReader interface {
	Get(i uint64) (bool, error)
	GetMany(idx []uint64, out []bool) error
	Len() (uint64, error)
	Count() (uint64, error)
	Ones(from uint64) func(yield func(uint64) bool)
}

// bitsAdapter makes Bits and SnapshotBits (whose Ones returns iter.Seq)
// fit bitsReader.
type bitsAdapter struct {
	get   func(uint64) (bool, error)
	many  func([]uint64, []bool) error
	n     func() (uint64, error)
	count func() (uint64, error)
	ones  func(uint64) func(func(uint64) bool)
}

func (a bitsAdapter) Get(i uint64) (bool, error)                     { return a.get(i) }
func (a bitsAdapter) GetMany(idx []uint64, out []bool) error         { return a.many(idx, out) }
func (a bitsAdapter) Len() (uint64, error)                           { return a.n() }
func (a bitsAdapter) Count() (uint64, error)                         { return a.count() }
func (a bitsAdapter) Ones(from uint64) func(yield func(uint64) bool) { return a.ones(from) }

func liveBits(b *Bits) bitsReader {
	return bitsAdapter{b.Get, b.GetMany, b.Len, b.Count, func(f uint64) func(func(uint64) bool) { return b.Ones(f) }}
}

func snapBits(b *SnapshotBits) bitsReader {
	return bitsAdapter{b.Get, b.GetMany, b.Len, b.Count, func(f uint64) func(func(uint64) bool) { return b.Ones(f) }}
}

// checkBits compares every read of r with the model: Count, Len, Get
// around every set bit and at random, GetMany against a loop of Get, and
// Ones from random starting points.
func checkBits(t testing.TB, rng *rand.Rand, r bitsReader, m *bitsModel, where string) {
	t.Helper()
	if c, err := r.Count(); err != nil || c != uint64(m.n) {
		t.Fatalf("%s: Count = %d, %v; want %d", where, c, err, m.n)
	}
	// Len is the highest index written + 1, or the file's length if larger;
	// the file grows in whole table words of 32 bits.
	n, err := r.Len()
	if err != nil || n < m.hi || n > (m.hi+31)/32*32 {
		t.Fatalf("%s: Len = %d, %v; want %d (or up to the next multiple of 32)", where, n, err, m.hi)
	}
	ones := m.ones(0)
	probe := []uint64{0, n, n + 1, 1 << 40}
	for range 100 { // around set bits: run edges are likely there
		if len(ones) > 0 {
			i := ones[rng.IntN(len(ones))]
			probe = append(probe, i, i+1, i-min(i, 1))
		}
	}
	for range 200 {
		probe = append(probe, rng.Uint64N(m.hi+100))
	}
	out := make([]bool, len(probe))
	if err := r.GetMany(probe, out); err != nil {
		t.Fatal(err)
	}
	for j, i := range probe {
		v, err := r.Get(i)
		if err != nil || v != m.get(i) {
			t.Fatalf("%s: Get(%d) = %v, %v; want %v", where, i, v, err, m.get(i))
		}
		if out[j] != v {
			t.Fatalf("%s: GetMany[%d] (bit %d) = %v, Get = %v", where, j, i, out[j], v)
		}
	}
	for _, from := range []uint64{0, rng.Uint64N(m.hi + 1), rng.Uint64N(m.hi + 1), m.hi, 1 << 41} {
		var got []uint64
		for i := range r.Ones(from) {
			got = append(got, i)
		}
		i0, _ := slices.BinarySearch(ones, from)
		if want := ones[i0:]; !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("%s: Ones(%d) = %d bits, want %d (first difference at %d)", where, from, len(got), len(want), firstDiff(got, want))
		}
	}
	// Ones stops when the consumer does.
	count := 0
	for range r.Ones(0) {
		count++
		if count == 2 {
			break
		}
	}
	if count != min(2, len(ones)) {
		t.Fatalf("%s: Ones with an early break yielded %d", where, count)
	}
}

// firstDiff returns the first element where a and b differ.
func firstDiff(a, b []uint64) uint64 {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return min(a[i], b[i])
		}
	}
	if len(a) > len(b) {
		return a[len(b)]
	}
	if len(b) > len(a) {
		return b[len(a)]
	}
	return 0
}

// TestBitsReadsMatchModel is the bitslice read contract as a property:
// after random Set and SetRange calls (some over whole 32768-bit runs)
// spread over pending tables, snapshots, flushes and reopens, Count, Len,
// Get, GetMany and Ones agree with a model, and snapshots keep reading
// their instant.
func TestBitsReadsMatchModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	dir := t.TempDir()
	opts := &Options{FlushInterval: -1}
	db := openT(t, dir, opts)
	defer func() { closeT(t, db) }()
	b := mustBits(t, db, "b")
	m := newBitsModel()
	type snapAt struct {
		s *Snapshot
		m *bitsModel
	}
	var snaps []snapAt
	op := uint64(0)
	rounds := 10
	if testing.Short() {
		rounds = 4
	}
	const span = 1 << 17 // four runs of 32768 bits
	for r := range rounds {
		for range 20 + rng.IntN(60) {
			op++
			v := rng.IntN(2) == 0
			switch rng.IntN(6) {
			case 0: // whole runs
				lo := uint64(rng.IntN(span/32768)) * 32768
				hi := lo + uint64(1+rng.IntN(2))*32768
				if err := b.SetRange(ctx, lo, hi, v, op); err != nil {
					t.Fatal(err)
				}
				m.apply(lo, hi, v)
			case 1: // a ragged range
				lo := rng.Uint64N(span)
				hi := lo + rng.Uint64N(200)
				if err := b.SetRange(ctx, lo, hi, v, op); err != nil {
					t.Fatal(err)
				}
				m.apply(lo, hi, v)
			default:
				i := rng.Uint64N(span)
				if rng.IntN(3) == 0 && m.n > 0 {
					ones := m.ones(rng.Uint64N(m.hi))
					if len(ones) > 0 {
						i = ones[0] // clear (or set again) a set bit
					}
				}
				mustSet(t, b, i, v, op)
				m.apply(i, i+1, v)
			}
			if rng.IntN(40) == 0 {
				s, err := db.NewSnapshot()
				if err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, snapAt{s, m.clone()})
			}
			if rng.IntN(50) == 0 {
				mustFlush(t, db)
			}
		}
		where := fmt.Sprintf("seed %d round %d", seed, r)
		checkBits(t, rng, liveBits(b), m, where)
		for i, s := range snaps {
			sb, err := s.s.Bits("b")
			if err != nil {
				t.Fatal(err)
			}
			checkBits(t, rng, snapBits(sb), s.m, fmt.Sprintf("%s snapshot %d", where, i))
		}
		switch rng.IntN(4) {
		case 0:
			mustFlush(t, db)
		case 1:
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			closeT(t, db)
			db = openT(t, dir, opts)
			b = mustBits(t, db, "b")
			// A reopened bitslice's Len is the file's: whole 32-bit words.
		}
	}
	for _, s := range snaps {
		s.s.Close()
	}
}

// TestBitsSetRangeWholeRunsCheap: a SetRange over whole runs of 32768 bits
// with no pending change costs a pointer per run, not the bits.
func TestBitsSetRangeWholeRunsCheap(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	b := mustBits(t, db, "b")
	const n = 1 << 26 // 2048 runs; 8 MiB as bits
	if err := b.SetRange(ctx, 0, n, true, 1); err != nil {
		t.Fatal(err)
	}
	if p := db.Metrics().PendingBytes; p > 64<<10 {
		t.Fatalf("SetRange of %d whole runs holds %d pending bytes", n/32768, p)
	}
	if c, _ := b.Count(); c != n {
		t.Fatalf("Count = %d, want %d", c, n)
	}
	mustSet(t, b, 5, false, 2)
	if c, _ := b.Count(); c != n-1 {
		t.Fatalf("Count after clearing one = %d", c)
	}
	mustFlush(t, db)
	if c, _ := b.Count(); c != n-1 {
		t.Fatalf("Count after flush = %d", c)
	}
	wantBit(t, b, n-1, true)
	wantBit(t, b, 5, false)
}

// TestBitsOnesEndsWhenEngineCloses: Ones ends early, without error, once
// the engine closes (checked every 32768 bits: one set bit per run of them
// here); a snapshot's Ones once the snapshot closes.
func TestBitsOnesEndsWhenEngineCloses(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	b := mustBits(t, db, "b")
	for i := range uint64(100) {
		if err := b.Set(ctx, i*32768+i, true, 1); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := snap.Bits("b")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range sb.Ones(0) {
		n++
		if n == 10 {
			snap.Close()
		}
	}
	if n != 10 {
		t.Fatalf("snapshot Ones yielded %d, want 10 (it stops once the snapshot closes)", n)
	}
	n = 0
	for range b.Ones(0) {
		n++
		if n == 10 {
			closeT(t, db)
		}
	}
	if n != 10 {
		t.Fatalf("Ones yielded %d, want 10 (it stops once the engine closes)", n)
	}
}

// TestBitsNextOnes: NextOnes reads what Ones reads, pending and flushed,
// into every dst size from 1 to 300, each call continuing at the previous
// next; from past the length reads nothing and returns from; an empty dst
// is ErrBadRange; once the engine closes it returns 0, from and ErrClosed.
// A snapshot's NextOnes reads the snapshot, and returns ErrClosed once it
// closes.
func TestBitsNextOnes(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	b := mustBits(t, db, "b")
	var set []uint64
	for i := range uint64(300) {
		set = append(set, i*777+i%5) // sparse, indexed pages
	}
	for i := uint64(250000); i < 250100; i++ {
		set = append(set, i) // a run of adjacent bits, a dense page below
	}
	for _, i := range set {
		if err := b.Set(ctx, i, true, 1); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		want := slices.Collect(b.Ones(0))
		if len(want) != len(set) {
			t.Fatalf("%s: Ones read %d bits, want %d", what, len(want), len(set))
		}
		n0, _ := b.Len()
		for size := 1; size <= 300; size++ {
			dst := make([]uint64, size)
			var got []uint64
			from := uint64(0)
			for {
				n, next, err := b.NextOnes(from, dst)
				if err != nil {
					t.Fatalf("%s: NextOnes(%d, [%d]): %v", what, from, size, err)
				}
				got = append(got, dst[:n]...)
				if n < size {
					if next != n0 {
						t.Fatalf("%s: NextOnes(%d, [%d]) ended at next %d, want the length %d", what, from, size, next, n0)
					}
					break
				}
				from = next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: NextOnes in batches of %d read %d bits, Ones %d", what, size, len(got), len(want))
			}
		}
		dst := make([]uint64, 4)
		for _, from := range []uint64{n0, n0 + 1, 1 << 50} {
			if n, next, err := b.NextOnes(from, dst); n != 0 || next != from || err != nil {
				t.Fatalf("%s: NextOnes(%d) past the length %d = %d, %d, %v; want 0, from, nil", what, from, n0, n, next, err)
			}
		}
		if n, next, err := b.NextOnes(5, nil); n != 0 || next != 5 || !errors.Is(err, ErrBadRange) {
			t.Fatalf("%s: NextOnes with an empty dst = %d, %d, %v; want 0, 5, ErrBadRange", what, n, next, err)
		}
	}
	check("pending")
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("flushed")
	// A snapshot's NextOnes reads the snapshot: not a bit set after it.
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, 7, true, 2); err != nil {
		t.Fatal(err)
	}
	sb, err := snap.Bits("b")
	if err != nil {
		t.Fatal(err)
	}
	none, err := snap.Bits("none")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 3, 64, 65, 256} {
		dst := make([]uint64, size)
		var got []uint64
		for n, next, err := sb.NextOnes(0, dst); n > 0 || err != nil; n, next, err = sb.NextOnes(next, dst) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, dst[:n]...)
		}
		if !slices.Equal(got, set) {
			t.Fatalf("snapshot NextOnes in batches of %d read %d bits, want the %d set before it", size, len(got), len(set))
		}
	}
	if n, next, err := sb.NextOnes(5, nil); n != 0 || next != 5 || !errors.Is(err, ErrBadRange) {
		t.Fatalf("snapshot NextOnes with an empty dst = %d, %d, %v; want 0, 5, ErrBadRange", n, next, err)
	}
	if n, next, err := none.NextOnes(5, make([]uint64, 4)); n != 0 || next != 5 || err != nil {
		t.Fatalf("NextOnes of a bitslice the snapshot lacks = %d, %d, %v; want 0, 5, nil", n, next, err)
	}
	snap.Close()
	if n, next, err := sb.NextOnes(3, make([]uint64, 4)); n != 0 || next != 3 || !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot NextOnes after its Close = %d, %d, %v; want 0, 3, ErrClosed", n, next, err)
	}
	closeT(t, db)
	dst := make([]uint64, 8)
	if n, next, err := b.NextOnes(3, dst); n != 0 || next != 3 || !errors.Is(err, ErrClosed) {
		t.Fatalf("NextOnes after Close = %d, %d, %v; want 0, 3, ErrClosed", n, next, err)
	}
}

// ---- Batch ----

// TestBatchContract: Len, Err, Reset; a batch copies its keys and values;
// Apply does not reset it (it can be applied again as a later op); Apply
// makes its op complete (the watermark covers it without EndOp); Update
// builds and applies.
func TestBatchContract(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	mustPut(t, k, "gone", "x", 1)
	bt := db.NewBatch()
	if bt.Len() != 0 || bt.Err() != nil {
		t.Fatal("new batch not empty")
	}
	key, val := []byte("a"), []byte("1")
	bt.Put(k, key, val)
	key[0], val[0] = 'X', 'X' // the batch copied them
	bt.Delete(k, []byte("gone"))
	bt.DeleteRange(k, []byte("r0"), []byte("r9"))
	bt.DeleteRange(k, nil, []byte("0"))
	bt.Set(b, 7, true)
	bt.SetRange(b, 100, 110, true)
	if bt.Len() != 6 || bt.Err() != nil {
		t.Fatalf("Len %d Err %v", bt.Len(), bt.Err())
	}
	mustPut(t, k, "r5", "in range", 1)
	if err := db.Apply(ctx, bt, 2); err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "a", "1")
	wantGet(t, k, "gone", "")
	wantGet(t, k, "r5", "")
	wantBit(t, b, 7, true)
	if c, _ := b.Count(); c != 11 {
		t.Fatalf("Count %d, want 11", c)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 2 {
		t.Fatalf("watermark %d after a batch op 2, want 2", wm)
	}
	// Apply did not reset it: applying it again as op 3 redoes every change.
	if bt.Len() != 6 {
		t.Fatalf("Len after Apply = %d", bt.Len())
	}
	mustPut(t, k, "gone", "back", 3)
	if err := db.Apply(ctx, bt, 4); err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "gone", "")
	// The first problem is recorded; later ones do not replace it.
	bt.Put(k, nil, nil)
	bt.Set(b, 1<<40, true)
	if !errors.Is(bt.Err(), ErrEmptyKey) {
		t.Fatalf("Err = %v, want ErrEmptyKey", bt.Err())
	}
	if err := db.Apply(ctx, bt, 5); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Apply = %v", err)
	}
	bt.Reset()
	if bt.Len() != 0 || bt.Err() != nil {
		t.Fatalf("after Reset: Len %d Err %v", bt.Len(), bt.Err())
	}
	bt.Put(k, []byte("after-reset"), []byte("y"))
	if err := db.Apply(ctx, bt, 5); err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "after-reset", "y")
	wantGet(t, k, "a", "1")
	sentinel := errors.New("no")
	if err := db.Update(ctx, 6, func(b *Batch) error { b.Put(k, []byte("u"), nil); return sentinel }); err != sentinel {
		t.Fatalf("Update returned %v, want fn's error as is", err)
	}
	wantGet(t, k, "u", "")
	if err := db.Update(ctx, 6, func(b *Batch) error { b.Put(k, []byte("u"), []byte("6")); return nil }); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 6 {
		t.Fatalf("watermark after reopen %d, want 6", wm)
	}
	wantGet(t, mustKV(t, db, "k"), "u", "6")
	wantGet(t, mustKV(t, db, "k"), "after-reset", "y")
}

// TestBatchHandleAcrossReopen: a handle kept across a reopen belongs to
// another engine: ErrForeign in a batch, ErrClosed when used directly.
func TestBatchHandleAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	oldK, oldB := mustKV(t, db, "k"), mustBits(t, db, "b")
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	bt := db.NewBatch()
	bt.Put(oldK, []byte("a"), []byte("1"))
	if err := db.Apply(ctx, bt, 1); !errors.Is(err, ErrForeign) {
		t.Fatalf("batch with a handle of the closed engine: %v", err)
	}
	bt = db.NewBatch()
	bt.Set(oldB, 1, true)
	if err := db.Apply(ctx, bt, 1); !errors.Is(err, ErrForeign) {
		t.Fatalf("batch with a bitslice handle of the closed engine: %v", err)
	}
	if err := oldK.Put(ctx, []byte("a"), nil, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put through a handle of the closed engine: %v", err)
	}
	wantGet(t, mustKV(t, db, "k"), "a", "")
}

// ---- Snapshot ----

// TestSnapshotUnaffectedByLaterWrites: a snapshot reads its instant while
// 100 goroutines write, delete, range-delete, apply batches and flush.
func TestSnapshotUnaffectedByLaterWrites(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 4))
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	m := kvModel{}
	bm := newBitsModel()
	for op := uint64(1); op <= 300; op++ {
		kvOp(t, rng, k, m, op)
		i := rng.Uint64N(5000)
		mustSet(t, b, i, true, op)
		bm.apply(i, i+1, true)
		if op == 150 {
			mustFlush(t, db)
		}
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	sk, _ := snap.KV("k")
	sb, _ := snap.Bits("b")
	checkKV(t, rng, sk, m, "before the writes")
	checkBits(t, rng, snapBits(sb), bm, "before the writes")
	var wg sync.WaitGroup
	for g := range 100 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(100+g)))
			for i := range 20 {
				var err error
				switch r.IntN(6) {
				case 0:
					err = db.Flush(ctx)
				case 1:
					err = k.DeleteRange(ctx, randBound(r), nil, 0)
				case 2:
					err = b.SetRange(ctx, r.Uint64N(6000), 6000, r.IntN(2) == 0, 0)
				case 3:
					err = db.Update(ctx, 0, func(bt *Batch) error {
						bt.Put(k, []byte(randKey(r)), []byte("batch"))
						bt.Set(b, r.Uint64N(6000), false)
						return nil
					})
				default:
					err = k.Put(ctx, []byte(randKey(r)), fmt.Appendf(nil, "g%d-%d", g, i), 0)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mustFlush(t, db)
	checkKV(t, rng, sk, m, "after the writes")
	checkBits(t, rng, snapBits(sb), bm, "after the writes")
	if n := snap.db.Metrics().Snapshots; n != 1 {
		t.Fatalf("Snapshots = %d", n)
	}
}

// TestSnapshotNeverSeesPartOfABatch: batches that write the same value to
// two keys of two keyspaces and the same bit pair, and range-delete a
// marker, applied concurrently with flushes and snapshots: every snapshot
// sees each batch whole or not at all.
func TestSnapshotNeverSeesPartOfABatch(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: time.Millisecond})
	defer closeT(t, db)
	x, y, b := mustKV(t, db, "x"), mustKV(t, db, "y"), mustBits(t, db, "b")
	const W, N = 4, 300
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writers sync.WaitGroup
	for w := range W {
		writers.Go(func() {
			for i := range N {
				v := fmt.Appendf(nil, "%d-%d", w, i)
				bit := i%2 == 0
				if err := db.Update(ctx, 0, func(bt *Batch) error {
					bt.Put(x, fmt.Appendf(nil, "w%d", w), v)
					bt.DeleteRange(y, fmt.Appendf(nil, "w%d", w), fmt.Appendf(nil, "w%d\xff", w))
					bt.Put(y, fmt.Appendf(nil, "w%d", w), v)
					bt.Set(b, uint64(w*2), bit)
					bt.SetRange(b, uint64(1000+w*100), uint64(1000+w*100+64), bit)
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	snaps := 0
	check := func() {
		s, err := db.NewSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sx, _ := s.KV("x")
		sy, _ := s.KV("y")
		sb, _ := s.Bits("b")
		for w := range W {
			key := []byte(fmt.Sprintf("w%d", w))
			vx, ex := sx.Get(key)
			vy, ey := sy.Get(key)
			if !bytes.Equal(vx, vy) || (ex == nil) != (ey == nil) {
				t.Fatalf("snapshot sees part of a batch: x=%q (%v) y=%q (%v)", vx, ex, vy, ey)
			}
			if ex != nil {
				continue
			}
			var i int
			fmt.Sscanf(string(vx[bytes.IndexByte(vx, '-')+1:]), "%d", &i)
			bit, _ := sb.Get(uint64(w * 2))
			c := 0
			for j := range sb.Ones(uint64(1000 + w*100)) {
				if j >= uint64(1000+w*100+64) {
					break
				}
				c++
			}
			if bit != (i%2 == 0) || (c == 64) != bit || (c != 0 && c != 64) {
				t.Fatalf("snapshot sees part of batch %d of writer %d: bit %v, %d of 64 range bits", i, w, bit, c)
			}
		}
		snaps++
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d snapshots checked", snaps)
}

// TestSnapshotOfMissingKeyspaceReadsEmpty: "A keyspace that did not exist
// then reads as empty": Get is ErrNotFound, GetMany nil values, and a scan
// (NewIter) finds nothing.
func TestSnapshotOfMissingKeyspaceReadsEmpty(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	defer closeT(t, db)
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	mustPut(t, mustKV(t, db, "later"), "a", "1", 0) // created after the snapshot
	sk, err := snap.KV("later")
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, sk, "a", "")
	vals := [][]byte{[]byte("x")}
	if _, err := sk.GetMany([][]byte{[]byte("a")}, vals, nil); err != nil || vals[0] != nil {
		t.Fatalf("GetMany = %q, %v", vals[0], err)
	}
	sb, err := snap.Bits("later")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sb.Len(); n != 0 || err != nil {
		t.Fatalf("Len = %d, %v", n, err)
	}
	it, err := sk.NewIter(nil)
	if err != nil {
		t.Fatalf("NewIter of a keyspace that did not exist at the snapshot: %v (the comment says it reads as empty)", err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("found %q", it.Key())
	}
}

// TestSnapshotClose: Close is idempotent; reads of a closed snapshot (and
// its iterators) return ErrClosed while the engine goes on, also readers of
// a keyspace or bitslice that did not exist at the snapshot; Close of the
// engine closes the snapshots still open.
func TestSnapshotClose(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 0)
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	sk, _ := s.KV("k")
	sb, _ := s.Bits("b") // did not exist at the snapshot
	mustBits(t, db, "b")
	nk, _ := s.KV("never")
	if _, err := sb.Count(); err != nil {
		t.Fatalf("Count of a bitslice that did not exist, open snapshot: %v", err)
	}
	s.Close()
	s.Close()
	if _, err := sk.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get of a closed snapshot: %v", err)
	}
	if _, err := sk.NewIter(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("NewIter of a closed snapshot: %v", err)
	}
	// "return ErrClosed once the snapshot or the engine is closed", also
	// for a keyspace or bitslice that did not exist at the snapshot.
	if _, err := sb.Count(); !errors.Is(err, ErrClosed) {
		t.Errorf("Count of a bitslice that did not exist, closed snapshot: %v, want ErrClosed", err)
	}
	if _, err := sb.Get(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Get of a bitslice that did not exist, closed snapshot: %v, want ErrClosed", err)
	}
	if _, err := nk.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get in a keyspace that did not exist, closed snapshot: %v, want ErrClosed", err)
	}
	wantGet(t, k, "a", "1") // the engine goes on
	s2, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	sk2, _ := s2.KV("k")
	closeT(t, db)
	if _, err := sk2.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get of a snapshot after the engine closed: %v", err)
	}
	s2.Close()
	if _, err := db.NewSnapshot(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewSnapshot after Close: %v", err)
	}
}

// ---- errors ----

// TestErrorsNameWhatIsInvolved: errors wrap their sentinel with the
// keyspace, bitslice or path involved.
func TestErrorsNameWhatIsInvolved(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{MaxValueSize: 4})
	defer closeT(t, db)
	k, b := mustKV(t, db, "users-ks"), mustBits(t, db, "live-bits")
	for _, c := range []struct {
		err      error
		sentinel error
		name     string
	}{
		{k.Put(ctx, []byte("a"), []byte("12345"), 0), ErrValueTooLarge, "users-ks"},
		{k.DeleteRange(ctx, []byte("b"), []byte("a"), 0), ErrBadRange, "users-ks"},
		{b.Set(ctx, 1<<40, true, 0), ErrOutOfRange, "live-bits"},
		{func() error { _, err := Open(dir, nil); return err }(), ErrLocked, dir},
		{func() error { _, err := db.KV("a/b"); return err }(), ErrBadName, "a/b"},
	} {
		if !errors.Is(c.err, c.sentinel) || !strings.Contains(c.err.Error(), c.name) {
			t.Errorf("%v: want %v naming %q", c.err, c.sentinel, c.name)
		}
	}
	// Lower packages' sentinels are the engine's (errors.Is both ways).
	if !errors.Is(ErrNotFound, ErrNotFound) || !errors.Is(ErrBadName, ErrBadName) {
		t.Error("sentinels are not the lower packages'")
	}
	if _, err := os.Stat(filepath.Join(dir, "nothing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// TestSnapshotSeesEveryCompletedWrite: a snapshot sees every write that
// completed before NewSnapshot, while flushes commit and release
// generations concurrently. One writer puts an increasing counter into
// key "x" of K keyspaces in turn (and sets the bit of that number) and
// records, after each write returns, the value each keyspace must show at
// least; a snapshot taken after reading those floors must show at least
// them in every keyspace and bit. (It fails when
// NewSnapshot takes the pebble snapshot before it pins the pending tables:
// a generation committed after the former and released before the latter
// is in neither.)
func TestSnapshotSeesEveryCompletedWrite(t *testing.T) {
	// The store on a MemFS makes syncs instant, and many keyspaces make
	// NewSnapshot's pinning loop long: a generation committed after the
	// pebble snapshot is then often released before its keyspace is pinned.
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, GroupWait: -1, storeFS: vfs.NewMem()})
	defer closeT(t, db)
	const K = 1000
	ks := make([]*KV, K)
	for j := range ks {
		ks[j] = mustKV(t, db, fmt.Sprintf("k%03d", j))
	}
	b := mustBits(t, db, "b")
	var floors [K]atomic.Int64
	var floorBit atomic.Int64 // bits 1..floorBit are set
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the writer
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			j := i % K
			if err := ks[j].Put(ctx, []byte("x"), fmt.Appendf(nil, "%012d", i), 0); err != nil {
				t.Error(err)
				return
			}
			floors[j].Store(i)
			if err := b.Set(ctx, uint64(i), true, 0); err != nil {
				t.Error(err)
				return
			}
			floorBit.Store(i)
		}
	})
	wg.Go(func() { // the flusher
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	snaps := 200
	if testing.Short() {
		snaps = 50
	}
	bad := 0
	for n := 0; n < snaps && !t.Failed(); n++ {
		var want [K]int64
		for j := range want {
			want[j] = floors[j].Load()
		}
		wantBits := floorBit.Load()
		s, err := db.NewSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		sb, err := s.Bits("b")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := sb.Count(); err != nil || int64(c) < wantBits {
			t.Errorf("snapshot %d: Count %d, %v; but %d bits had been set before NewSnapshot", n, c, err, wantBits)
		}
		if v, err := sb.Get(uint64(wantBits)); wantBits > 0 && (err != nil || !v) {
			t.Errorf("snapshot %d: bit %d = %v, %v; set before NewSnapshot", n, wantBits, v, err)
		}
		for j := range ks {
			sk, err := s.KV(ks[j].Name())
			if err != nil {
				t.Fatal(err)
			}
			v, err := sk.Get([]byte("x"))
			var got int64
			if err == nil {
				fmt.Sscanf(string(v), "%d", &got)
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			if got < want[j] {
				if bad < 5 {
					t.Errorf("snapshot %d: keyspace %s shows %d (%v), but write %d had completed before NewSnapshot", n, ks[j].Name(), got, err, want[j])
				}
				bad++
			}
		}
		s.Close()
	}
	close(stop)
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d stale reads in %d snapshots", bad, snaps)
	}
}

// TestApplyRacingDropKV: "Changes to a keyspace dropped concurrently are
// discarded, as if the batch had come first": batches that write to a
// keyspace being dropped and to another one either succeed (their change
// to the other keyspace stays, the dropped one's goes with the drop) or
// fail with ErrDropped having applied nothing.
func TestApplyRacingDropKV(t *testing.T) {
	for round := range 5 {
		db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
		d, other := mustKV(t, db, "d"), mustKV(t, db, "other")
		var wg sync.WaitGroup
		const W = 4
		applied := make([][]int, W)
		refused := make([][]int, W)
		started := make(chan struct{}, W)
		for w := range W {
			wg.Go(func() {
				for i := 0; ; i++ {
					if i == 3 {
						started <- struct{}{}
					}
					key := fmt.Appendf(nil, "w%d-%d", w, i)
					err := db.Update(ctx, 0, func(b *Batch) error {
						b.Put(d, key, []byte("d"))
						b.Put(other, key, []byte("o"))
						return nil
					})
					switch {
					case errors.Is(err, ErrDropped):
						refused[w] = append(refused[w], i)
						return
					case err != nil:
						t.Error(err)
						return
					}
					applied[w] = append(applied[w], i)
				}
			})
		}
		for range W {
			<-started
		}
		if err := db.DropKV(ctx, "d", 0); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for pass := range 2 {
			if got := scan(t, mustKV(t, db, "d"), nil); len(got) != 0 {
				t.Fatalf("round %d pass %d: the new keyspace d holds %v", round, pass, got)
			}
			o := mustKV(t, db, "other")
			for w := range W {
				for _, i := range applied[w] {
					wantGet(t, o, fmt.Sprintf("w%d-%d", w, i), "o")
				}
				for _, i := range refused[w] {
					wantGet(t, o, fmt.Sprintf("w%d-%d", w, i), "") // nothing of a refused batch
				}
			}
			if pass == 0 {
				dir := db.Dir()
				closeT(t, db)
				db = openT(t, dir, nil)
			}
		}
		closeT(t, db)
	}
}

// TestFlushMemtables: FlushMemtables makes the writes durable like Flush
// and moves them out of the write-ahead log into sstables.
func TestFlushMemtables(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 1)
	// The newest sstable's file number: a flush writes a table numbered
	// above every one before it, and so does a compaction that merges it
	// with older tables (counting the tables instead failed once in an
	// invariants build, where pebble compacted the flush's table with the
	// one before it: one table before, one after).
	ssts := func() int {
		newest := 0
		ents, err := os.ReadDir(filepath.Join(dir, enginedir.StoreDir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if num, ok := strings.CutSuffix(e.Name(), ".sst"); ok {
				n, err := strconv.Atoi(num)
				if err != nil {
					t.Fatalf("sstable %q: %v", e.Name(), err)
				}
				newest = max(newest, n)
			}
		}
		return newest
	}
	before := ssts()
	if err := db.EndOp(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	if db.Watermark() != 1 {
		t.Fatalf("watermark %d after FlushMemtables, want 1", db.Watermark())
	}
	if after := ssts(); after <= before {
		t.Fatalf("newest sstable %06d after FlushMemtables, %06d before", after, before)
	}
	crashed := filepath.Join(t.TempDir(), "c")
	if err := copyDir(dir, crashed); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	db = openT(t, crashed, nil)
	defer closeT(t, db)
	wantGet(t, mustKV(t, db, "k"), "a", "1")
}
