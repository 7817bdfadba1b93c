package kvbuf

// Crash tests (contracts 2 and 4): a child process (this test binary,
// re-executed with the "crash" role) runs ops 1, 2, 3, ... against three
// keyspaces and two bitslices and flushes in a loop; the parent kills it
// with SIGKILL at a random moment, or the child kills itself at a chosen
// point (a pebble WAL write or sync, or a failpoint inside bitslice: msync,
// header write, halfway through ApplyWords, grow allocation, grow header).
//
// An op is several writes, derived from its number alone (crashOpFor), so
// that op n always makes the same change: some ops are one Batch (Apply or
// Update), the others several single calls (Put, Delete, DeleteRange, Set,
// SetRange, DropKV), some followed by EndOp. Children run with the flush
// pipeline at its maximum depth or at depth 1, flushing explicitly (the
// writer every 1..300 ops and two flusher goroutines) and in the
// background (a short interval and a small pending-memory bound).
//
// After every kill the parent reopens the engine and checks (verifyCrash):
//
//   - Open succeeds; the watermark wm is at least that of every Flush a
//     child saw succeed, and at least done-1 for the highest op done whose
//     writes had all returned before a successful Flush began (and at least
//     done if op done was a batch or ended with EndOp);
//   - wm is not above any op the last child started, and never goes
//     backwards;
//   - every keyspace holds exactly the state after ops 1..wm, except that
//     op wm+1, if it was written by single calls, may be there in part: the
//     first j of its writes, for some j (a freeze between two of its calls;
//     a batch is never there in part); if op wm+1's writes were covered by a
//     successful Flush, all of them are there. Scans and Gets agree.
//   - every bit holds its value as of op wm (wm+1 in the last case above),
//     or a value that a later op some child started wrote (bitslices are
//     flushed before the store batch carrying the watermark, so they may be
//     ahead, never behind); Count agrees with the bits.
//
// In TestCrashRecovery a durable subscriber runs in every child and keeps
// its resolved marks in a file; after the checks the parent resumes it from
// its last mark, replays the host's log from wm+1 to the last op the child
// may have started, and checks that the watch gets exactly the changes of
// the missing ops (crash_watch_test.go). The next child resumes at the
// watermark + 1 that replay left.
//
// TestCrashableMemStore runs the same workload in-process with the store on
// vfs.NewCrashableMem, whose CrashClone keeps only what pebble synced (plus
// a random share of what it did not): power-loss semantics for the store,
// taken at deterministic WAL writes and syncs. TestCrashPowerCut
// (powercut_failpoints_test.go, -tags kvbuf_failpoints) extends power-loss
// semantics to the bitslices and the engine directory's own files.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/testutil"
	"github.com/kvbuf/kvbuf/storage"
)

var (
	crashIterations = flag.Int("crash.iterations", 20, "kills in TestCrashRecovery (env KVBUF_CRASH_ITERATIONS overrides; 1000 for a soak)")
	crashSeed       = flag.Uint64("crash.seed", 0, "seed of TestCrashRecovery and TestCrashableMemStore (0: time-based, printed)")
)

func init() { childRoles["crash"] = crashChild }

// Environment of a crash child.
const (
	crashDirEnv   = "KVBUF_CRASH_DIR"
	crashSeedEnv  = "KVBUF_CRASH_SEED"
	crashDepthEnv = "KVBUF_CRASH_DEPTH" // Options.PipelineDepth
	crashPointEnv = "KVBUF_CRASH_POINT" // "name:n": the child kills itself at the n-th hit of a point
)

const (
	crashKeys      = 800     // keys per keyspace: k0000 .. k0799
	crashMaxBits   = 1 << 24 // bit indexes stay below it
	crashWChunk    = 64      // ops promised per W line
	childLifetime  = 60 * time.Second
	crashWaitPoint = 5 * time.Second // a self-kill point not reached by then is killed from outside
)

var (
	crashKeyspaces = []string{"ks0", "ks1", "ks2"}
	crashBitslices = []string{"b0", "b1"}
)

// crashWrite is one write of an op.
type crashWrite struct {
	kind   byte // 'p' Put, 'd' Delete, 'r' DeleteRange, 's' Set, 'S' SetRange, 'x' DropKV
	ks     int  // keyspace (p d r x)
	key    string
	value  string
	hi     string // r: upper bound
	loOpen bool   // r: nil lower bound
	hiOpen bool   // r: nil upper bound
	bs     int    // bitslice (s S)
	lo     uint64 // s: the bit; S: [lo, hiBit)
	hiBit  uint64
	v      bool
}

// crashOp is op n: its writes, and how it is applied.
type crashOp struct {
	n      uint64
	batch  bool // one Batch (Apply for even n, Update for odd); else single calls
	endOp  bool // single calls followed by EndOp(n)
	writes []crashWrite
}

func crashKey(i int) string { return fmt.Sprintf("k%04d", i) }

// crashBitBound is the bound of the bit indexes op n uses. It widens with n
// so that flushes keep growing the files (the grow points stay reachable).
func crashBitBound(n uint64) uint64 { return min(4096+4*n, crashMaxBits) }

// crashOpFor returns op n. It depends on n alone.
func crashOpFor(n uint64) crashOp {
	r := rand.New(rand.NewPCG(n, 0x6b76627566))
	op := crashOp{n: n, batch: r.IntN(2) == 0}
	op.endOp = !op.batch && r.IntN(3) == 0
	nw := 2 + r.IntN(5)
	bound := crashBitBound(n)
	for i := range nw {
		var w crashWrite
		switch k := r.IntN(100); {
		case k < 35:
			w = crashWrite{kind: 'p', ks: r.IntN(len(crashKeyspaces)), key: crashKey(r.IntN(crashKeys))}
			pad := r.IntN(40)
			if r.IntN(50) == 0 {
				pad = 1000 + r.IntN(3000) // fills WAL blocks now and then
			}
			w.value = fmt.Sprintf("v%d.%d.", n, i) + strings.Repeat("x", pad)
		case k < 47:
			w = crashWrite{kind: 'd', ks: r.IntN(len(crashKeyspaces)), key: crashKey(r.IntN(crashKeys))}
		case k < 52:
			lo := r.IntN(crashKeys)
			w = crashWrite{kind: 'r', ks: r.IntN(len(crashKeyspaces)), key: crashKey(lo), hi: crashKey(lo + 1 + r.IntN(30))}
			switch r.IntN(40) {
			case 0:
				w.loOpen = true
			case 1:
				w.hiOpen = true
			}
		case k < 82:
			w = crashWrite{kind: 's', bs: r.IntN(len(crashBitslices)), lo: r.Uint64N(bound), v: r.IntN(3) != 0}
		default:
			w = crashWrite{kind: 'S', bs: r.IntN(len(crashBitslices)), lo: r.Uint64N(bound), v: r.IntN(2) == 0}
			width := 1 + r.Uint64N(600)
			if r.IntN(25) == 0 {
				width = 32768 + r.Uint64N(40000) // whole runs of the pending table
			}
			w.hiBit = min(w.lo+width, bound)
		}
		op.writes = append(op.writes, w)
	}
	if !op.batch && r.IntN(300) == 0 {
		// A drop, somewhere in the op (a Batch cannot drop).
		at := r.IntN(len(op.writes) + 1)
		op.writes = slices.Insert(op.writes, at, crashWrite{kind: 'x', ks: r.IntN(len(crashKeyspaces))})
	}
	return op
}

// bitset is a model bitslice.
type bitset []uint64

func newBitset() bitset { return make(bitset, crashMaxBits/64) }

func (b bitset) get(i uint64) bool { return b[i>>6]>>(i&63)&1 == 1 }

func (b bitset) setRange(lo, hi uint64, v bool) {
	for i := lo; i < hi; {
		w := i >> 6
		end := min(hi, (w+1)<<6)
		m := ^uint64(0) >> (64 - (end - i)) << (i & 63)
		if v {
			b[w] |= m
		} else {
			b[w] &^= m
		}
		i = end
	}
}

func (b bitset) count() uint64 {
	var n int
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// crashModel is the state after ops 1..upTo.
type crashModel struct {
	upTo uint64
	kv   []map[string]string
	bits []bitset
}

func newCrashModel() *crashModel {
	m := &crashModel{}
	for range crashKeyspaces {
		m.kv = append(m.kv, map[string]string{})
	}
	for range crashBitslices {
		m.bits = append(m.bits, newBitset())
	}
	return m
}

// applyKV applies w's change to the keyspaces kv (bits writes do nothing).
func applyKV(kv []map[string]string, w crashWrite) {
	switch w.kind {
	case 'p':
		kv[w.ks][w.key] = w.value
	case 'd':
		delete(kv[w.ks], w.key)
	case 'r':
		for k := range kv[w.ks] {
			if (w.loOpen || k >= w.key) && (w.hiOpen || k < w.hi) {
				delete(kv[w.ks], k)
			}
		}
	case 'x':
		clear(kv[w.ks])
	}
}

// applyBits applies w's change to the bitslices bs (KV writes do nothing).
func applyBits(bs []bitset, w crashWrite) {
	switch w.kind {
	case 's':
		bs[w.bs].setRange(w.lo, w.lo+1, w.v)
	case 'S':
		bs[w.bs].setRange(w.lo, w.hiBit, w.v)
	}
}

func (m *crashModel) advance(to uint64) {
	for n := m.upTo + 1; n <= to; n++ {
		for _, w := range crashOpFor(n).writes {
			applyKV(m.kv, w)
			applyBits(m.bits, w)
		}
	}
	m.upTo = max(m.upTo, to)
}

func cloneKV(kv []map[string]string) []map[string]string {
	c := make([]map[string]string, len(kv))
	for i, m := range kv {
		c[i] = maps.Clone(m)
	}
	return c
}

// crashAcks is what the children were told by successful Flush calls.
type crashAcks struct {
	wm   uint64 // the highest watermark seen after a successful Flush
	done uint64 // the highest op whose writes had all returned before a successful Flush began
}

// checkNoIngestLeftovers checks, after the engine in dir was opened, that
// no file of an ingest a crash interrupted is left in the store: Open
// removes them (storage.IngestDir).
func checkNoIngestLeftovers(t testing.TB, dir string, opts *Options) {
	t.Helper()
	fsys := vfs.Default
	if opts != nil && opts.storeFS != nil {
		fsys = opts.storeFS
	}
	names, err := fsys.List(filepath.Join(dir, enginedir.StoreDir, storage.IngestDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("list the ingest directory: %v", err)
	}
	if len(names) > 0 {
		t.Fatalf("after reopening, the store holds files of unfinished ingests: %v", names)
	}
}

// verifyCrash opens dir and checks it against the model as described at the
// top of the file; m is advanced to the watermark found. started bounds the
// ops the last writer started (the watermark cannot be above it); maxOp
// bounds the ops any writer started, over every child, not just the last:
// bits written ahead of the watermark by an earlier child survive its crash
// until a replay overwrites them.
func verifyCrash(t testing.TB, dir string, opts *Options, m *crashModel, acks crashAcks, started, maxOp uint64) (wm uint64) {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	// Writers that retained their feed (opts.WatchRetain set) must have
	// left it whole; others left nothing to check.
	retained := o.WatchRetain != nil
	if !retained {
		o.WatchRetain = &WatchRetention{}
	}
	db, err := Open(dir, &o)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("close after the checks: %v", err)
		}
	}()
	checkNoIngestLeftovers(t, dir, opts)
	wm = db.Watermark()
	switch {
	case wm < acks.wm:
		t.Fatalf("watermark %d after crash is behind the watermark %d an acknowledged Flush reported", wm, acks.wm)
	case acks.done > 0 && wm < acks.done-1:
		t.Fatalf("watermark %d after crash is below op %d-1, whose writes an acknowledged Flush covered", wm, acks.done)
	case wm > started:
		t.Fatalf("watermark %d after crash is ahead of every op the writer started (<= %d)", wm, started)
	case wm < m.upTo:
		t.Fatalf("watermark went backwards: %d after an earlier %d", wm, m.upTo)
	}
	m.advance(wm)
	next := crashOpFor(wm + 1)
	acked := acks.done == wm+1 // every write of op wm+1 is durable
	if acked && (next.batch || next.endOp) {
		t.Fatalf("watermark %d: op %d (batch %v, EndOp %v) completed before an acknowledged Flush, which must have claimed it",
			wm, wm+1, next.batch, next.endOp)
	}

	// KV: the state at wm, or that plus the first j writes of op wm+1.
	cands := [][]map[string]string{m.kv}
	if !next.batch {
		c := m.kv
		for _, w := range next.writes {
			c = cloneKV(c)
			applyKV(c, w)
			cands = append(cands, c)
		}
	}
	if acked {
		cands = cands[len(cands)-1:]
	}
	got := readCrashKV(t, db)
	match := -1
	for j, c := range cands {
		if kvEqual(got, c) {
			match = j
			break
		}
	}
	if match < 0 {
		t.Fatalf("watermark %d: the keyspaces match neither the state at op %d nor any prefix of op %d's writes (batch %v, acknowledged %v):\n%s\nop %d: %+v",
			wm, wm, wm+1, next.batch, acked, kvDiff(got, cands[0]), wm+1, next.writes)
	}

	// Bits: the value at the base op, or one a later started op wrote.
	base := m.bits
	baseOp := wm
	if acked {
		baseOp = wm + 1
		base = make([]bitset, len(m.bits))
		for i := range base {
			base[i] = slices.Clone(m.bits[i])
		}
		for _, w := range next.writes {
			applyBits(base, w)
		}
	}
	laterT, laterF := make([]bitset, len(crashBitslices)), make([]bitset, len(crashBitslices))
	for i := range crashBitslices {
		laterT[i], laterF[i] = newBitset(), newBitset()
	}
	for n := baseOp + 1; n <= maxOp; n++ {
		for _, w := range crashOpFor(n).writes {
			switch w.kind {
			case 's':
				lt := [][]bitset{laterF, laterT}[b2i(w.v)]
				lt[w.bs].setRange(w.lo, w.lo+1, true)
			case 'S':
				lt := [][]bitset{laterF, laterT}[b2i(w.v)]
				lt[w.bs].setRange(w.lo, w.hiBit, true)
			}
		}
	}
	names := db.Bitslices()
	for i, name := range crashBitslices {
		if !slices.Contains(names, name) {
			// Never created: nothing may be expected of it.
			if c := base[i].count(); c != 0 {
				t.Fatalf("watermark %d: bitslice %s missing, the model has %d bits set", wm, name, c)
			}
			continue
		}
		b, err := db.Bits(name)
		if err != nil {
			t.Fatal(err)
		}
		checkCrashBits(t, wm, b, base[i], laterT[i], laterF[i], next)
	}
	checkRetainedFeed(t, db, wm, retained)
	return wm
}

// crashEvents renders op n's changes as a watch reports them (evText).
func crashEvents(n uint64) []string {
	var out []string
	for _, w := range crashOpFor(n).writes {
		var e WatchEvent
		switch w.kind {
		case 'p':
			e = WatchEvent{Kind: EventPut, Keyspace: crashKeyspaces[w.ks], Key: []byte(w.key), Value: []byte(w.value)}
		case 'd':
			e = WatchEvent{Kind: EventDelete, Keyspace: crashKeyspaces[w.ks], Key: []byte(w.key)}
		case 'r':
			e = WatchEvent{Kind: EventDeleteRange, Keyspace: crashKeyspaces[w.ks], Key: bound(w.loOpen, w.key), End: bound(w.hiOpen, w.hi)}
		case 's':
			e = WatchEvent{Kind: EventSetBits, Bitslice: crashBitslices[w.bs], Lo: w.lo, Hi: w.lo + 1, Bit: w.v}
		case 'S':
			e = WatchEvent{Kind: EventSetBits, Bitslice: crashBitslices[w.bs], Lo: w.lo, Hi: w.hiBit, Bit: w.v}
		case 'x':
			e = WatchEvent{Kind: EventDropKeyspace, Keyspace: crashKeyspaces[w.ks]}
		}
		e.Op = n
		out = append(out, evText(e))
	}
	return out
}

// checkRetainedFeed: after a crash and reopen, a watch resumed from a
// retained op p gets exactly the changes of ops p..wm, in op order, none
// missing or repeated, then a mark at wm (the retained feed is exactly the
// durable state: watch_retain.go, R1), in both modes; a start below the
// retained ops is ErrCompacted.
func checkRetainedFeed(t testing.TB, db *DB, wm uint64, retained bool) {
	t.Helper()
	m := db.Metrics()
	floor := m.WatchRetainedFrom
	ctx := context.Background()
	if retained && floor > 1 && m.WatchRetainedBytes < DefaultWatchRetainBytes/2 {
		// Every writer retained its feed with the default bound, which
		// these runs do not reach: nothing may be missing.
		t.Fatalf("watermark %d: the retained feed starts at op %d (%d bytes retained), not at op 1", wm, floor, m.WatchRetainedBytes)
	}
	if floor > 1 {
		if _, err := db.Watch(ctx, &WatchOptions{From: floor - 1}); !errors.Is(err, ErrCompacted) {
			t.Fatalf("watermark %d: watch from %d, below the retained op %d: %v, want ErrCompacted", wm, floor-1, floor, err)
		}
	}
	if floor > wm {
		return // nothing retained (a writer ran without retention)
	}
	for i, p := range []uint64{floor, floor + (wm-floor)/2, wm} {
		w, err := db.Watch(ctx, &WatchOptions{From: p, Durable: i%2 == 1})
		if err != nil {
			t.Fatalf("watermark %d: watch from retained op %d: %v", wm, p, err)
		}
		var got []string
		for {
			e := nextEvent(t, w)
			if e.Kind == EventResolved {
				if e.Op != wm {
					t.Fatalf("watermark %d: watch from %d: first mark %d", wm, p, e.Op)
				}
				break
			}
			got = append(got, evText(e))
		}
		w.Close()
		var want []string
		for n := p; n <= wm; n++ {
			want = append(want, crashEvents(n)...)
		}
		checkSame(t, fmt.Sprintf("watermark %d: retained feed from op %d", wm, p), got, want)
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// readCrashKV reads every keyspace by a scan and checks that Get agrees
// with the scan for every key of the workload.
func readCrashKV(t testing.TB, db *DB) []map[string]string {
	t.Helper()
	names := db.Keyspaces()
	got := make([]map[string]string, len(crashKeyspaces))
	for i, name := range crashKeyspaces {
		got[i] = map[string]string{}
		if !slices.Contains(names, name) {
			continue
		}
		k, err := db.KV(name)
		if err != nil {
			t.Fatal(err)
		}
		it, err := k.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		var last []byte
		for ok := it.First(); ok; ok = it.Next() {
			if last != nil && string(it.Key()) <= string(last) {
				t.Fatalf("keyspace %s: scan went from %q to %q", name, last, it.Key())
			}
			last = append(last[:0], it.Key()...)
			got[i][string(it.Key())] = string(it.Value())
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			t.Fatal(err)
		}
		for j := range crashKeys {
			key := crashKey(j)
			v, err := k.Get([]byte(key))
			want, ok := got[i][key]
			switch {
			case ok && (err != nil || string(v) != want):
				t.Fatalf("keyspace %s: Get(%s) = %d bytes %.20q, %v; the scan found %d bytes %.20q", name, key, len(v), v, err, len(want), want)
			case !ok && !errors.Is(err, ErrNotFound):
				t.Fatalf("keyspace %s: Get(%s) = %d bytes %.20q, %v; the scan did not find it", name, key, len(v), v, err)
			}
		}
	}
	return got
}

func kvEqual(a, b []map[string]string) bool {
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for k, v := range a[i] {
			if w, ok := b[i][k]; !ok || w != v {
				return false
			}
		}
	}
	return true
}

// kvDiff describes how got differs from want (at most 20 lines).
func kvDiff(got, want []map[string]string) string {
	var lines []string
	for i, name := range crashKeyspaces {
		for k, v := range got[i] {
			if w, ok := want[i][k]; !ok || w != v {
				lines = append(lines, fmt.Sprintf("  %s/%s = %.24q, want %.24q (present %v)", name, k, v, w, ok))
			}
		}
		for k, w := range want[i] {
			if _, ok := got[i][k]; !ok {
				lines = append(lines, fmt.Sprintf("  %s/%s missing, want %.24q", name, k, w))
			}
		}
	}
	slices.Sort(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("  ... %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// checkCrashBits checks every bit of b: the base value, or a value later
// ops wrote (laterT: some wrote true; laterF: some wrote false).
func checkCrashBits(t testing.TB, wm uint64, b *Bits, base, laterT, laterF bitset, next crashOp) {
	t.Helper()
	got := newBitset()
	var ones uint64
	for i := range b.Ones(0) {
		if i >= crashMaxBits {
			t.Fatalf("watermark %d: bitslice %s: bit %d set, past every index the workload uses", wm, b.Name(), i)
		}
		got.setRange(i, i+1, true)
		ones++
	}
	if c, err := b.Count(); err != nil || c != ones {
		t.Fatalf("watermark %d: bitslice %s: Count = %d, %v; Ones found %d", wm, b.Name(), c, err, ones)
	}
	for w := range got {
		a := got[w]
		bad := (a ^ base[w]) &^ (a & laterT[w]) &^ (^a & laterF[w])
		if bad != 0 {
			i := uint64(w)<<6 + uint64(bits.TrailingZeros64(bad))
			t.Fatalf("watermark %d: bitslice %s: bit %d = %v; the value at the watermark is %v, and later ops wrote true: %v, false: %v (op %d: %+v)",
				wm, b.Name(), i, got.get(i), base.get(i), laterT.get(i), laterF.get(i), wm+1, next.writes)
		}
	}
	// Point reads agree with Ones: a sample, and the bits op wm+1 writes.
	idx := make([]uint64, 0, 4096)
	for i := uint64(0); i < crashMaxBits && len(idx) < cap(idx)-64; i += crashMaxBits / 2048 {
		idx = append(idx, i, i+1)
	}
	for _, w := range next.writes {
		if w.kind == 's' || w.kind == 'S' {
			idx = append(idx, w.lo)
		}
	}
	out := make([]bool, len(idx))
	if err := b.GetMany(idx, out); err != nil {
		t.Fatal(err)
	}
	for j, i := range idx {
		v, err := b.Get(i)
		if err != nil || v != got.get(i) || out[j] != v {
			t.Fatalf("watermark %d: bitslice %s: Get(%d) = %v, %v, GetMany %v; Ones says %v", wm, b.Name(), i, v, err, out[j], got.get(i))
		}
	}
}

// crashHooks connects the workload to a reporter (the child) or to the
// in-process test.
type crashHooks struct {
	promise  func(n uint64)         // before op n-crashWChunk+1: no op above n starts before the next promise
	flushed  func(wm, done uint64)  // after a successful Flush
	inFlight func(n int)            // Metrics.MaxInFlight grew to n
	ingested func(n int64)          // Metrics.IngestedGenerations after a successful Flush (may be nil)
	stop     func(next uint64) bool // checked before each op
}

// crashWorker applies ops.
type crashWorker struct {
	db    *DB
	kvs   []*KV
	bits  []*Bits
	batch *Batch
}

// newCrashWorker opens the workload's bitslices (keyspaces are opened on
// first use).
func newCrashWorker(db *DB) (*crashWorker, error) {
	cw := &crashWorker{db: db, kvs: make([]*KV, len(crashKeyspaces)), batch: db.NewBatch()}
	for _, name := range crashBitslices {
		b, err := db.Bits(name)
		if err != nil {
			return nil, err
		}
		cw.bits = append(cw.bits, b)
	}
	return cw, nil
}

func (cw *crashWorker) kv(ctx context.Context, i int) (*KV, error) {
	if cw.kvs[i] == nil {
		k, err := cw.db.KV(crashKeyspaces[i])
		if err != nil {
			return nil, err
		}
		cw.kvs[i] = k
	}
	return cw.kvs[i], nil
}

func bound(open bool, s string) []byte {
	if open {
		return nil
	}
	return []byte(s)
}

func (cw *crashWorker) apply(ctx context.Context, op crashOp) error {
	db := cw.db
	if op.batch {
		fill := func(b *Batch) error {
			for _, w := range op.writes {
				var k *KV
				if w.kind == 'p' || w.kind == 'd' || w.kind == 'r' {
					var err error
					if k, err = cw.kv(ctx, w.ks); err != nil {
						return err
					}
				}
				switch w.kind {
				case 'p':
					b.Put(k, []byte(w.key), []byte(w.value))
				case 'd':
					b.Delete(k, []byte(w.key))
				case 'r':
					b.DeleteRange(k, bound(w.loOpen, w.key), bound(w.hiOpen, w.hi))
				case 's':
					b.Set(cw.bits[w.bs], w.lo, w.v)
				case 'S':
					b.SetRange(cw.bits[w.bs], w.lo, w.hiBit, w.v)
				default:
					return fmt.Errorf("write %c in a batch", w.kind)
				}
			}
			return b.Err()
		}
		if op.n%2 == 1 {
			return db.Update(ctx, op.n, fill)
		}
		cw.batch.Reset()
		if err := fill(cw.batch); err != nil {
			return err
		}
		return db.Apply(ctx, cw.batch, op.n)
	}
	for _, w := range op.writes {
		var err error
		switch w.kind {
		case 'p', 'd', 'r':
			var k *KV
			if k, err = cw.kv(ctx, w.ks); err != nil {
				return err
			}
			switch w.kind {
			case 'p':
				err = k.Put(ctx, []byte(w.key), []byte(w.value), op.n)
			case 'd':
				err = k.Delete(ctx, []byte(w.key), op.n)
			case 'r':
				err = k.DeleteRange(ctx, bound(w.loOpen, w.key), bound(w.hiOpen, w.hi), op.n)
			}
		case 's':
			err = cw.bits[w.bs].Set(ctx, w.lo, w.v, op.n)
		case 'S':
			err = cw.bits[w.bs].SetRange(ctx, w.lo, w.hiBit, w.v, op.n)
		case 'x':
			err = db.DropKV(ctx, crashKeyspaces[w.ks], op.n)
			cw.kvs[w.ks] = nil // the next write makes a new keyspace
		}
		if err != nil {
			return fmt.Errorf("write %c: %w", w.kind, err)
		}
	}
	if op.endOp {
		return db.EndOp(ctx, op.n)
	}
	return nil
}

// crashWorkload runs ops from start on until h.stop says so: one writer
// (which also flushes every 1..300 ops) and two flusher goroutines that
// flush after every op they see completed. It returns the first error.
func crashWorkload(db *DB, start uint64, rng *rand.Rand, h crashHooks) error {
	cw, err := newCrashWorker(db)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		done     atomic.Uint64 // every write of every op <= done has returned
		maxIF    atomic.Int64
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	done.Store(start - 1)
	flushed := func(d uint64) {
		h.flushed(db.Watermark(), d)
		if h.ingested != nil {
			h.ingested(db.Metrics().IngestedGenerations)
		}
		if n := int64(db.Metrics().MaxInFlight); n > maxIF.Load() {
			for {
				cur := maxIF.Load()
				if n <= cur {
					break
				}
				if maxIF.CompareAndSwap(cur, n) {
					h.inFlight(int(n))
					break
				}
			}
		}
	}
	progress := make(chan struct{})
	var progMu sync.Mutex
	for range 2 {
		wg.Go(func() {
			for {
				progMu.Lock()
				ch := progress
				progMu.Unlock()
				d := done.Load()
				if err := db.Flush(ctx); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("flusher: Flush: %w", err))
					}
					return
				}
				flushed(d)
				select {
				case <-ch: // an op completed since we looked
				case <-ctx.Done():
					return
				}
			}
		})
	}
	nextFlush := start + uint64(rng.IntN(300))
	for n := start; ctx.Err() == nil && !h.stop(n); n++ {
		if (n-start)%crashWChunk == 0 {
			h.promise(n + crashWChunk - 1)
		}
		if err := cw.apply(ctx, crashOpFor(n)); err != nil {
			fail(fmt.Errorf("op %d: %w", n, err))
			break
		}
		done.Store(n)
		progMu.Lock()
		close(progress)
		progress = make(chan struct{})
		progMu.Unlock()
		if n >= nextFlush {
			if err := db.Flush(ctx); err != nil {
				fail(fmt.Errorf("flush after op %d: %w", n, err))
				break
			}
			flushed(n)
			nextFlush = n + 1 + uint64(rng.IntN(300))
		}
	}
	cancel()
	wg.Wait()
	return firstErr
}

// crashChild is the re-executed writer (role "crash"). It reports on stdout
// with the testutil report protocol and runs until it is killed.
func crashChild() int {
	dir := os.Getenv(crashDirEnv)
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	depth, _ := strconv.Atoi(os.Getenv(crashDepthEnv))
	rng := rand.New(rand.NewPCG(seed, 0))
	opts := &Options{
		FlushInterval:   time.Duration(1+rng.IntN(4)) * time.Millisecond,
		MaxPendingBytes: int64(64<<10) << rng.IntN(5),
		PipelineDepth:   depth,
		IngestThreshold: crashIngestThreshold(rng, os.Getenv(crashPointEnv)),
		WatchRetain:     &WatchRetention{}, // the retained feed is checked too
	}
	// Half the children have a slow disk: WAL syncs take 2ms more on
	// average (exponentially distributed), so that more generations are in
	// flight at once. This is a model of the device, not synchronisation.
	var slow *rand.Rand
	var slowMu sync.Mutex
	if rng.IntN(2) == 0 {
		slow = rand.New(rand.NewPCG(seed, 1))
	}
	var walPoint string
	var kill func() error
	if p := os.Getenv(crashPointEnv); p != "" {
		name, nth, _ := strings.Cut(p, ":")
		n, _ := strconv.Atoi(nth)
		var hits atomic.Int64
		// Armed before Open: a point hit while the engine opens kills the
		// child before it is ready, a crash during Open (runCrashChild).
		kill = func() error {
			if hits.Add(1) == int64(n) {
				fmt.Fprintf(os.Stderr, "kill point %s: hit %d\n", name, n)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // SIGKILL is not delivered synchronously
			}
			return nil
		}
		if strings.HasPrefix(name, "pebble/") || strings.HasPrefix(name, "ingest/") {
			walPoint = name
		} else {
			failpoint.Enable(name, kill)
		}
	}
	opts.storeFS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if walPoint != "" && storeOpMatches(walPoint, op) {
			if err := kill(); err != nil {
				return err
			}
		}
		if slow != nil && storeOpMatches("pebble/wal-sync", op) {
			slowMu.Lock()
			d := time.Duration(slow.ExpFloat64() * float64(500*time.Microsecond))
			slowMu.Unlock()
			time.Sleep(d)
		}
		return nil
	}))
	time.AfterFunc(childLifetime, func() { os.Exit(3) }) // an orphan must not run forever
	db, err := Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	if path := os.Getenv(crashMarksEnv); path != "" {
		delay := []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond}[rand.New(rand.NewPCG(seed, 2)).IntN(3)]
		if err := crashSubscribe(db, path, delay); err != nil {
			fmt.Fprintln(os.Stderr, "subscriber:", err)
			return 4
		}
	}
	rep := testutil.NewReporter(os.Stdout)
	start := db.Watermark() + 1
	rep.Ready(start)
	err = crashWorkload(db, start, rand.New(rand.NewPCG(seed, start)), crashHooks{
		promise:  rep.Promise,
		flushed:  rep.Flushed,
		inFlight: func(n int) { rep.Max("inflight", uint64(n)) },
		ingested: func(n int64) { rep.Max("ingested", uint64(n)) },
		stop:     func(uint64) bool { return false },
	})
	fmt.Fprintln(os.Stderr, "workload:", err)
	return 4
}

func isWAL(path string) bool { return strings.HasSuffix(path, ".log") }

// crashIngestThreshold picks a child's Options.IngestThreshold: ingestion
// for every generation when the kill point is on the ingestion path (or in
// the MANIFEST, which ingestions and the memtable flushes they cause
// write); at a point in pebble's write-ahead log, the default (these
// generations are below it), so that the log is written (with generations
// ingested, a WAL point was mostly never reached, and the round ran its
// whole workload, ingesting a generation each millisecond: most of a
// minute under -race for nothing); else one of the three.
func crashIngestThreshold(rng *rand.Rand, point string) int64 {
	switch {
	case strings.HasPrefix(point, "ingest/") || strings.HasPrefix(point, "pebble/manifest") ||
		strings.HasPrefix(point, "storage/ingest"):
		return 1
	case strings.HasPrefix(point, "pebble/wal"):
		return 0
	}
	return []int64{0, 1, 16 << 10}[rng.IntN(3)]
}

// pebbleOpMatches says whether a WAL operation is the one a
// "pebble/wal-write" or "pebble/wal-sync" point names.
func pebbleOpMatches(point string, k errorfs.OpKind) bool {
	switch point {
	case "pebble/wal-write":
		return k == errorfs.OpFileWrite || k == errorfs.OpFileWriteAt
	case "pebble/wal-sync":
		return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
	}
	return false
}

// storeOpMatches says whether a store file operation is the one a point
// names: "pebble/wal-write", "pebble/wal-sync" (the WAL),
// "pebble/manifest-write", "pebble/manifest-sync" (the MANIFEST),
// "ingest/sst-write", "ingest/sst-sync" (an ingest's table, written by
// storage.Ingest before pebble links it in).
func storeOpMatches(point string, op errorfs.Op) bool {
	write := op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	switch point {
	case "pebble/wal-write":
		return write && isWAL(op.Path)
	case "pebble/wal-sync":
		return sync && isWAL(op.Path)
	case "pebble/manifest-write":
		return write && strings.Contains(filepath.Base(op.Path), "MANIFEST-")
	case "pebble/manifest-sync":
		return sync && strings.Contains(filepath.Base(op.Path), "MANIFEST-")
	case "ingest/sst-write":
		return write && strings.Contains(op.Path, storage.IngestDir)
	case "ingest/sst-sync":
		return sync && strings.Contains(op.Path, storage.IngestDir)
	}
	return false
}

// crashPoints are the self-kill points the crash test cycles through.
// Failpoints inside bitslice need -tags kvbuf_failpoints.
func crashPoints() []string {
	p := []string{"pebble/wal-write", "pebble/wal-sync", "ingest/sst-write", "ingest/sst-sync",
		"pebble/manifest-write", "pebble/manifest-sync"}
	if failpoint.Enabled {
		p = append(p, failpoint.BitsliceSyncMsync, failpoint.BitsliceSyncHeader, failpoint.BitsliceSyncHeaderWritten,
			failpoint.BitsliceApplyWords, failpoint.BitsliceGrowAllocate, failpoint.BitsliceGrowHeader,
			failpoint.StorageIngestSync, failpoint.StorageIngestApply, failpoint.StorageIngestApplied,
			failpoint.FlushBitsHeader)
	}
	return p
}

// crashTestSeed returns the seed (the flag, or the time) and logs it, so
// that a failure can be replayed.
func crashTestSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -crash.seed %d)", seed, seed)
	return seed
}

func crashIterationCount(t testing.TB) int {
	iters := testutil.EnvInt(t, "KVBUF_CRASH_ITERATIONS", *crashIterations)
	if testing.Short() {
		iters = min(iters, 6)
	}
	return iters
}

func TestCrashRecovery(t *testing.T) { crashRecovery(t, crashIterationCount(t), crashPoints()) }

// crashRecovery kills iters children in turn over one directory, each
// checked after its kill: the even ones at a random moment, the odd ones
// at a point of points (in turn), each at a random hit of it. It returns
// the kills by mode ("point/how", "random-timing/how"; see runCrashChild).
func crashRecovery(t *testing.T, iters int, points []string) (byMode map[string]int) {
	seed := crashTestSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	replayRNG := rand.New(rand.NewPCG(seed, 3)) // apart, so that a seed kills as it did before the replay
	dir := t.TempDir()
	marks := filepath.Join(t.TempDir(), "marks") // the subscriber's (crash_watch_test.go)
	m := newCrashModel()
	byMode = map[string]int{}
	var (
		maxOp      uint64 // highest op any child may have started
		acks       crashAcks
		deepIF     uint64        // highest in-flight count reported at the maximum depth
		ingested   uint64        // generations the children reported flushed by ingestion
		resumedOps uint64        // ops whose changes the resumed watches checked
		following  time.Duration // in followResumedWatch
		began      = time.Now()
	)
	for i := range iters {
		// Even iterations kill at a random moment, odd ones at a point;
		// the pipeline depth alternates every two.
		point := ""
		if i%2 == 1 {
			name, hits := points[(i/2)%len(points)], 40
			if strings.HasPrefix(name, "bitslice/grow/") {
				hits = 4 // growth is rarer than syncs: keep the point reachable
			}
			point = fmt.Sprintf("%s:%d", name, 1+rng.IntN(hits))
		}
		depth := flush.MaxPipelineDepth
		if i/2%2 == 1 {
			depth = 1
		}
		delay := time.Duration(rng.IntN(250)) * time.Millisecond
		rep, how := runCrashChild(t, dir, marks, seed+uint64(i), depth, point, delay)
		// A child that killed itself at its point before it was ready
		// crashed inside Open (pebble syncs its MANIFEST when it flushes
		// the memtable replayed from the WAL, for one): it started no op,
		// so the ops that may have started are those the last check saw
		// done, and everything acknowledged before must still hold.
		started := rep.MaxOp
		if !rep.Ready {
			started = m.upTo
		}
		maxOp = max(maxOp, rep.MaxOp)
		ingested += rep.Max["ingested"]
		acks.wm = max(acks.wm, rep.AckedWM)
		acks.done = max(acks.done, rep.AckedDone)
		if inf := rep.Max["inflight"]; depth == 1 && inf > 1 {
			t.Fatalf("kill %d (seed %d): %d generations in flight at PipelineDepth 1", i+1, seed, inf)
		} else if depth > 1 {
			deepIF = max(deepIF, inf)
		}
		wm := verifyCrash(t, dir, &Options{WatchRetain: &WatchRetention{}}, m, acks, started, maxOp)
		// The subscriber resumes from its last mark and the host replays
		// its log: every op the child may have started (a host logs an op
		// before it applies it), or on half the kills a random part of
		// them, which leaves the rest to the next child (a writer
		// replaying ops whose bits an earlier one wrote ahead). The mode
		// alternates every four kills, so that each meets both kinds of
		// kill and both depths.
		durable := i/4%2 == 0
		last := max(wm, started)
		if replayRNG.IntN(2) == 0 {
			last = wm + replayRNG.Uint64N(last-wm+1)
		}
		followStart := time.Now()
		replayed, from := followResumedWatch(t, dir, marks, wm, last, durable)
		following += time.Since(followStart)
		resumedOps += replayed + 1 - from
		m.advance(replayed)
		acks.wm = max(acks.wm, replayed) // Close's flush returned nil
		mode := "random-timing"
		if point != "" {
			mode, _, _ = strings.Cut(point, ":")
		}
		byMode[mode+"/"+how]++
		if testing.Verbose() {
			t.Logf("kill %d (%s, %s, depth %d): watermark %d, acknowledged %d/%d, started <= %d, %d flushes, %d in flight; watch resumed from %d (durable %v), replayed to %d",
				i+1, mode, how, depth, wm, acks.wm, acks.done, maxOp, rep.Flushes, rep.Max["inflight"], from, durable, replayed)
		}
	}
	keys := make([]string, 0, len(byMode))
	for k := range byMode {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "\n  %-36s %d", k, byMode[k])
	}
	t.Logf("%d kills survived in %v, seed %d; last op started %d, watermark %d; max generations in flight at depth %d: %d; kills by point:%s",
		iters, time.Since(began).Round(time.Millisecond), seed, maxOp, m.upTo, flush.MaxPipelineDepth, deepIF, sb.String())
	t.Logf("generations flushed by ingestion, over the children: %d; ops whose changes the resumed watches checked: %d, in %v",
		ingested, resumedOps, following.Round(time.Millisecond))
	if iters >= 8 && ingested == 0 {
		t.Errorf("no child flushed a generation by ingestion: the ingestion path was not exercised")
	}
	if iters >= 8 && deepIF < 2 {
		t.Errorf("the children at PipelineDepth %d never had more than %d generation in flight: the deep pipeline was not exercised", flush.MaxPipelineDepth, deepIF)
	}
	return byMode
}

// runCrashChild runs one child until it dies: killed by us after delay (no
// point) or by itself at point (killed by us if it has not got there in
// crashWaitPoint). It returns the child's report and how it died:
// "parent-kill", "self-kill", or "open-kill" (by itself at point, inside
// Open, before it was ready: the point is armed from the start, because a
// crash while the engine opens is one to survive too).
func runCrashChild(t *testing.T, dir, marks string, seed uint64, depth int, point string, delay time.Duration) (*testutil.Report, string) {
	t.Helper()
	// In a -race build a child that races exits at once (status 66): the
	// kill would otherwise swallow the race detector's report.
	cmd := testutil.Reexec(t, "crash", crashDirEnv+"="+dir, crashMarksEnv+"="+marks, crashSeedEnv+"="+strconv.FormatUint(seed, 10),
		crashDepthEnv+"="+strconv.Itoa(depth), crashPointEnv+"="+point, "GORACE=halt_on_error=1")
	wait := delay
	if point != "" {
		wait = crashWaitPoint
	}
	t.Logf("crash child seed %d, point %q", seed, point) // the child's failures name no seed
	if point == "" {
		// Nothing kills it before it is ready but its own failure.
		rep, _, _ := testutil.RunAndKill(t, cmd, wait)
		return rep, "parent-kill"
	}
	rep, _, killedByUs := testutil.RunAndKillEarly(t, cmd, wait)
	switch {
	case !rep.Ready:
		return rep, "open-kill"
	case killedByUs:
		return rep, "parent-kill"
	}
	return rep, "self-kill"
}

// TestCrashableMemStore runs the workload in-process with the store on
// vfs.NewCrashableMem. At a deterministic WAL write or sync (chosen from the
// seed) it takes a crash clone of the store (what was synced, plus a random
// share of what was not) and a copy of the bitslice files; the engine
// reopened over them must pass the same checks as after a SIGKILL.
func TestCrashableMemStore(t *testing.T) {
	seed := crashTestSeed(t)
	rounds := 16
	if testing.Short() {
		rounds = 4
	}
	for r := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		point := []string{"pebble/wal-write", "pebble/wal-sync", "ingest/sst-sync", "pebble/manifest-sync"}[r%4]
		nth := 3 + rng.IntN(60)
		unsynced := []int{0, 50, 100}[r%3]
		depth := []int{flush.MaxPipelineDepth, 1}[r/2%2]
		t.Run(fmt.Sprintf("%s-%d-unsynced%d-depth%d", point, nth, unsynced, depth), func(t *testing.T) {
			crashableMemRound(t, rng, point, nth, unsynced, depth)
		})
	}
}

func crashableMemRound(t *testing.T, rng *rand.Rand, point string, nth, unsyncedPct, depth int) {
	dir := t.TempDir()
	mem := testutil.NewCrashableMem()
	bitsDir := filepath.Join(dir, enginedir.BitsDir)
	var (
		mu        sync.Mutex // guards the crash image: the hook runs on pebble's goroutines
		hits      int
		clone     *vfs.MemFS
		bitsImage map[string][]byte
		acksAt    crashAcks
		maxOpAt   uint64
		taken     atomic.Bool
		acks      struct {
			sync.Mutex
			crashAcks
		}
		maxOp atomic.Uint64
	)
	cloneRNG := rand.New(rand.NewPCG(rng.Uint64(), 0))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if taken.Load() || !storeOpMatches(point, op) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if hits++; hits == nth {
			// On a pebble goroutine, before the operation: the clone is
			// the store as a power cut here would leave it. The engine
			// runs on meanwhile, so the acknowledgements are read before
			// the images are taken (what they must hold) and the promise
			// after (what they may hold: bits of ops that started while
			// the images were taken can be in them).
			acks.Lock()
			acksAt = acks.crashAcks
			acks.Unlock()
			clone = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPct, RNG: cloneRNG})
			bitsImage = map[string][]byte{}
			ents, err := os.ReadDir(bitsDir)
			if err != nil {
				panic(err)
			}
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(bitsDir, e.Name()))
				if err != nil {
					panic(err)
				}
				bitsImage[e.Name()] = b
			}
			maxOpAt = maxOp.Load()
			taken.Store(true)
		}
		return nil
	})
	// The engine directory exists, durably, in the MemFS too (the engine
	// makes it on the OS file system); the store inside it is made by
	// Open, which must make its entry durable before it acknowledges
	// anything.
	syncedMkdirAll(t, mem, dir)
	opts := &Options{FlushInterval: time.Millisecond, MaxPendingBytes: 256 << 10, PipelineDepth: depth,
		IngestThreshold: crashIngestThreshold(rng, point), storeFS: errorfs.Wrap(mem, inj),
		WatchRetain: &WatchRetention{}}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	after := 0
	err = crashWorkload(db, 1, rng, crashHooks{
		promise: func(n uint64) { maxOp.Store(n) },
		flushed: func(wm, done uint64) {
			acks.Lock()
			acks.wm = max(acks.wm, wm)
			acks.done = max(acks.done, done)
			acks.Unlock()
		},
		inFlight: func(n int) {
			if depth == 1 && n > 1 {
				t.Errorf("%d generations in flight at PipelineDepth 1", n)
			}
		},
		stop: func(n uint64) bool {
			if taken.Load() {
				after++ // run on a little past the crash point, then stop
			}
			return after > 300 || n > 40_000
		},
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if clone == nil {
		t.Skipf("point %s:%d not reached", point, nth)
	}
	ents, err := os.ReadDir(bitsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := bitsImage[e.Name()]; !ok {
			if err := os.Remove(filepath.Join(bitsDir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, b := range bitsImage {
		if err := os.WriteFile(filepath.Join(bitsDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	wm := verifyCrash(t, dir, &Options{storeFS: clone, WatchRetain: &WatchRetention{}}, newCrashModel(), acksAt, maxOpAt, maxOpAt)
	t.Logf("watermark %d after the crash clone, acknowledged %d/%d, started <= %d", wm, acksAt.wm, acksAt.done, maxOpAt)
}

// syncedMkdirAll creates dir in fsys and syncs every directory on the way,
// so a crash clone keeps it.
func syncedMkdirAll(t testing.TB, fsys vfs.FS, dir string) {
	t.Helper()
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		f, err := fsys.OpenDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if d == filepath.Dir(d) {
			return
		}
	}
}

// TestCrashRangeDeleteSealRacesRelease is the smallest form of a data race
// the crash workload found (TestCrashableMemStore under -race): a range
// delete that seals the active table calls KV.newActive without kv.vmu
// (internal/buffer/kv.go, KV.DeleteRange), and newActive reads kv.lastCap, which
// KV.Release writes under kv.vmu. It fails only with -race.
func TestCrashRangeDeleteSealRacesRelease(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	k, err := db.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
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
	for i := range 2000 {
		// The Put makes the range delete find a key in the active table,
		// so it seals the table and takes a new one (newActive).
		if err := k.Put(ctx, []byte("a"), []byte(strconv.Itoa(i)), 0); err != nil {
			t.Fatal(err)
		}
		if err := k.DeleteRange(ctx, []byte("a"), []byte("b"), 0); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
