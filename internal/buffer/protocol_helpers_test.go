package buffer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// protoRig drives a KV overlay, a Bits overlay or both through the flush
// protocol as the engine does: writers under the shared side of a barrier;
// Freeze of every target under its exclusive side with one generation
// number; generations written in order (the bitslice first, then one store
// batch carrying the watermark) and released in order, only once written.
// The generation number doubles as the watermark a write persists.
type protoRig struct {
	t    testing.TB
	opts *Options

	kv   *kvRig   // nil without a KV target
	bits *bitsRig // nil without a Bits target
	file *protoFile

	gen   uint64       // last generation number handed out
	gens  []*protoGen  // frozen and not released, oldest first
	snaps []*protoSnap // open snapshots, in the order taken

	keys map[string]bool // every key the script named
	idx  map[uint64]bool // every bit index the script named
}

// protoGen is one frozen generation: each target's part (nil if it had
// nothing to flush) and whether it has been written.
type protoGen struct {
	g       uint64
	kv      *KVGen
	bits    *BitsGen
	written bool
}

type protoSnap struct {
	name string
	ss   *storage.Snapshot
	kv   *KVSnapshot
	bits *BitsSnapshot
}

// protoFile is the bitslice write path with injected failures: the
// faultyFile of bits_test.go (ApplyWords applies half the words and fails,
// as a torn write would; Sync fails) plus a mode that fails only Sync,
// after every word was applied.
type protoFile struct {
	*faultyFile
	failSync bool
}

func (f *protoFile) Sync() error {
	if f.failSync {
		return errBitsInjected
	}
	return f.faultyFile.Sync()
}

func (f *protoFile) SyncLagged() error {
	if f.failSync {
		return errBitsInjected
	}
	return f.faultyFile.SyncLagged()
}

func newProtoRig(t testing.TB, withKV, withBits bool, opts *Options) *protoRig {
	t.Helper()
	r := &protoRig{t: t, opts: opts, keys: map[string]bool{}, idx: map[uint64]bool{}}
	if withKV {
		r.kv = newKVRig(t, opts)
		// kvRig closes the store it opened; this closes the one a reopen
		// opened (Close is idempotent).
		t.Cleanup(func() { r.kv.st.Close() })
	}
	if withBits {
		path := filepath.Join(t.TempDir(), "b.bits")
		f, err := bitslice.Create(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.bits = &bitsRig{t: t}
		r.openBits(f)
		t.Cleanup(func() { r.bits.f.Close() })
	}
	t.Cleanup(r.closeSnapshots) // first: cleanups run last in, first out
	return r
}

// openBits puts a fresh overlay over f, writing through a protoFile.
func (r *protoRig) openBits(f *bitslice.File) {
	res, err := r.opts.resolve()
	if err != nil {
		r.t.Fatal(err)
	}
	r.file = &protoFile{faultyFile: &faultyFile{File: f}}
	r.bits.f = f
	r.bits.acct = Account{}
	r.bits.b = newBits(f, r.file, &r.bits.acct, res)
}

func errText(err error) string { return "error: " + err.Error() }

// noteKey adds key to the keys the consistency checks read, if it is one
// a read accepts.
func (r *protoRig) noteKey(key string) {
	if r.kv != nil && r.kv.kv.CheckKey([]byte(key)) == nil {
		r.keys[key] = true
	}
}

// --- writes ---

func (r *protoRig) put(key, val string) string {
	r.noteKey(key)
	r.kv.bar.RLock()
	defer r.kv.bar.RUnlock()
	// As the engine does: check once, then write (Put's precondition).
	if err := r.kv.kv.CheckPut([]byte(key), []byte(val)); err != nil {
		return errText(err)
	}
	if err := r.kv.kv.Put([]byte(key), []byte(val)); err != nil {
		return errText(err)
	}
	return ""
}

func (r *protoRig) del(key string) string {
	r.noteKey(key)
	r.kv.bar.RLock()
	defer r.kv.bar.RUnlock()
	if err := r.kv.kv.CheckKey([]byte(key)); err != nil {
		return errText(err)
	}
	if err := r.kv.kv.Delete([]byte(key)); err != nil {
		return errText(err)
	}
	return ""
}

func (r *protoRig) delRange(lo, hi *string) string {
	for _, k := range []*string{lo, hi} {
		if k != nil {
			r.noteKey(*k)
		}
	}
	r.kv.bar.RLock()
	defer r.kv.bar.RUnlock()
	if err := r.kv.kv.DeleteRange(bptr(lo), bptr(hi)); err != nil {
		return errText(err)
	}
	return ""
}

func (r *protoRig) drop() string {
	r.kv.bar.RLock()
	defer r.kv.bar.RUnlock()
	r.kv.kv.Drop()
	return ""
}

func (r *protoRig) set(i uint64, v bool) string {
	r.idx[i] = true
	r.bits.bar.RLock()
	defer r.bits.bar.RUnlock()
	if err := r.bits.b.Set(i, v); err != nil {
		return errText(err)
	}
	return ""
}

func (r *protoRig) setRange(lo, hi uint64, v bool) string {
	r.idx[lo] = true
	if hi > lo {
		r.idx[hi-1] = true
	}
	r.idx[hi] = true
	r.bits.bar.RLock()
	defer r.bits.bar.RUnlock()
	if err := r.bits.b.SetRange(lo, hi, v); err != nil {
		return errText(err)
	}
	return ""
}

// --- the flush protocol ---

// lockAll takes every target's barrier exclusively.
func (r *protoRig) lockAll() func() {
	if r.kv != nil {
		r.kv.bar.Lock()
	}
	if r.bits != nil {
		r.bits.bar.Lock()
	}
	return func() {
		if r.bits != nil {
			r.bits.bar.Unlock()
		}
		if r.kv != nil {
			r.kv.bar.Unlock()
		}
	}
}

// freeze freezes the next generation of every target and describes it.
func (r *protoRig) freeze() string {
	unlock := r.lockAll()
	r.gen++
	pg := &protoGen{g: r.gen}
	if r.kv != nil {
		pg.kv = r.kv.kv.Freeze(pg.g)
	}
	if r.bits != nil {
		pg.bits = r.bits.b.Freeze(pg.g)
	}
	unlock()
	if pg.kv == nil && pg.bits == nil {
		return fmt.Sprintf("generation %d: nothing to freeze", pg.g)
	}
	r.gens = append(r.gens, pg)
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d", pg.g)
	if pg.kv != nil {
		for i, t := range pg.kv.tables {
			fmt.Fprintf(&b, "\nkv table %d: %s", i+1, describeKVTable(t))
		}
	}
	if pg.bits != nil {
		for i, t := range pg.bits.tables {
			fmt.Fprintf(&b, "\nbits table %d: %s", i+1, describeBitsTable(t))
		}
	}
	return b.String()
}

// write writes the oldest generation not yet written: the bitslice first,
// then the store batch (AddTo, the watermark, Commit, Wait). fail injects
// a failure: "bits" (a torn apply), "sync" (the bitslice's sync) or "kv"
// (the batch is built and dropped, never committed); "" is none.
func (r *protoRig) write(fail string) string {
	var pg *protoGen
	for _, g := range r.gens {
		if !g.written {
			pg = g
			break
		}
	}
	if pg == nil {
		return "nothing to write"
	}
	if r.bits != nil {
		r.file.fail.Store(fail == "bits")
		r.file.failSync = fail == "sync"
		var err error
		if pg.bits != nil {
			err = pg.bits.Write(context.Background(), pg.g)
		}
		r.file.fail.Store(false)
		r.file.failSync = false
		if err != nil {
			return fmt.Sprintf("generation %d: bits write failed: %v", pg.g, err)
		}
	}
	if r.kv != nil {
		b := r.kv.st.NewBatch()
		if pg.kv != nil {
			if err := pg.kv.AddTo(context.Background(), b); err != nil {
				return fmt.Sprintf("generation %d: AddTo: %v", pg.g, err)
			}
		}
		b.SetWatermark(pg.g)
		if fail == "kv" {
			return fmt.Sprintf("generation %d: store batch of %s dropped (injected failure)", pg.g, plural(b.Len(), "entry"))
		}
		c, err := r.kv.st.Commit(b)
		if err == nil {
			err = c.Wait()
		}
		if err != nil {
			return fmt.Sprintf("generation %d: commit failed: %v", pg.g, err)
		}
	}
	pg.written = true
	return fmt.Sprintf("generation %d written (watermark %d)", pg.g, pg.g)
}

// release releases the oldest generation, which must have been written.
func (r *protoRig) release() string {
	if len(r.gens) == 0 {
		return "nothing to release"
	}
	pg := r.gens[0]
	if !pg.written {
		return fmt.Sprintf("generation %d is not written: not released", pg.g)
	}
	r.gens = r.gens[1:]
	if r.kv != nil {
		r.kv.kv.Release(pg.g)
	}
	if r.bits != nil {
		r.bits.b.Release(pg.g)
	}
	return fmt.Sprintf("generation %d released", pg.g)
}

// settle returns the bitslice to its direct-read fast path if it can.
func (r *protoRig) settle() string {
	unlock := r.lockAll()
	r.bits.b.Settle()
	unlock()
	return "fast path: " + onOff(r.bits.b.direct())
}

// reopen is a crash and restart: the pending state (overlays, frozen
// generations, snapshots) is dropped, the store and the bitslice file are
// closed and opened again, and new overlays are put over them.
func (r *protoRig) reopen() string {
	r.closeSnapshots()
	r.gens = nil
	var out []string
	if r.kv != nil {
		dir := r.kv.st.Dir()
		if err := r.kv.st.Close(); err != nil {
			r.t.Fatal(err)
		}
		st, err := storage.Open(dir, nil)
		if err != nil {
			r.t.Fatal(err)
		}
		r.kv.st, r.kv.acct, r.kv.queue = st, Account{}, nil
		if r.kv.kv, err = NewKV(st, 1, &r.kv.acct, r.opts); err != nil {
			r.t.Fatal(err)
		}
		wm, err := st.Watermark()
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("store watermark %d", wm))
	}
	if r.bits != nil {
		path := r.bits.f.Path()
		if err := r.bits.f.Close(); err != nil {
			r.t.Fatal(err)
		}
		f, err := bitslice.Open(path)
		if err != nil {
			r.t.Fatal(err)
		}
		r.openBits(f)
		out = append(out, fmt.Sprintf("bitslice watermark %d, %d bits", f.Watermark(), f.Len()))
	}
	return "reopened: " + strings.Join(out, "; ")
}

// --- snapshots ---

func (r *protoRig) snapshot(name string) string {
	if r.snap(name) != nil {
		return fmt.Sprintf("error: snapshot %s exists", name)
	}
	s := &protoSnap{name: name}
	unlock := r.lockAll()
	if r.kv != nil {
		ks := r.kv.kv.Snapshot() // pin first, store snapshot after
		ss, err := r.kv.st.NewSnapshot()
		if err != nil {
			ks.Close()
			unlock()
			return errText(err)
		}
		ks.SetStore(ss)
		s.ss, s.kv = ss, ks
	}
	if r.bits != nil {
		s.bits = r.bits.b.Snapshot()
	}
	unlock()
	r.snaps = append(r.snaps, s)
	return ""
}

func (r *protoRig) snap(name string) *protoSnap {
	for _, s := range r.snaps {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (s *protoSnap) close() {
	if s.kv != nil {
		s.kv.Close()
		_ = s.ss.Close()
	}
	if s.bits != nil {
		s.bits.Close()
	}
}

func (r *protoRig) closeSnapshot(name string) string {
	s := r.snap(name)
	if s == nil {
		return fmt.Sprintf("error: no snapshot %s", name)
	}
	s.close()
	r.snaps = slices.DeleteFunc(r.snaps, func(x *protoSnap) bool { return x == s })
	return ""
}

func (r *protoRig) closeSnapshots() {
	for _, s := range r.snaps {
		s.close()
	}
	r.snaps = nil
}

// --- reads ---

// protoKVReader is what KV and KVSnapshot share.
type protoKVReader interface {
	Get(key []byte) ([]byte, error)
	GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error)
	NewIter(lower, upper []byte) (*Iter, error)
}

// bitsReaderOnes is what Bits and BitsSnapshot share.
type bitsReaderOnes interface {
	bitsReader
	Ones(from uint64) iter.Seq[uint64]
}

// readers returns the KV and Bits readers of the live overlays, or of the
// snapshot called snap.
func (r *protoRig) readers(snap string) (protoKVReader, bitsReaderOnes, error) {
	var kr protoKVReader
	var br bitsReaderOnes
	if snap == "" {
		if r.kv != nil {
			kr = r.kv.kv
		}
		if r.bits != nil {
			br = r.bits.b
		}
		return kr, br, nil
	}
	s := r.snap(snap)
	if s == nil {
		return nil, nil, fmt.Errorf("no snapshot %s", snap)
	}
	if s.kv != nil {
		kr = s.kv
	}
	if s.bits != nil {
		br = s.bits
	}
	return kr, br, nil
}

// isIndex reports whether arg names a bit rather than a key: in a rig with
// a bitslice, a decimal number is a bit index (so scripts with both
// targets use keys that are not numbers).
func (r *protoRig) isIndex(arg string) (uint64, bool) {
	if r.bits == nil {
		return 0, false
	}
	i, err := strconv.ParseUint(arg, 10, 64)
	return i, err == nil
}

func showKV(k string, v []byte, err error) string {
	switch {
	case errors.Is(err, kverr.ErrNotFound):
		return k + ": not found"
	case err != nil:
		return k + ": " + errText(err)
	}
	return k + "=" + string(v)
}

func (r *protoRig) get(snap string, args []string) string {
	kr, br, err := r.readers(snap)
	if err != nil {
		return errText(err)
	}
	var out []string
	for _, a := range args {
		if i, ok := r.isIndex(a); ok {
			r.idx[i] = true
			out = append(out, fmt.Sprintf("%d=%s", i, bit(br.Get(i))))
			continue
		}
		k := keyArg(a)
		r.noteKey(k)
		v, err := kr.Get([]byte(k))
		out = append(out, showKV(a, v, err))
	}
	return strings.Join(out, "\n")
}

// getMany reads the keys of args with one GetMany and the bit indexes with
// another.
func (r *protoRig) getMany(snap string, args []string) string {
	kr, br, err := r.readers(snap)
	if err != nil {
		return errText(err)
	}
	var keys [][]byte
	var idx []uint64
	for _, a := range args {
		if i, ok := r.isIndex(a); ok {
			r.idx[i] = true
			idx = append(idx, i)
			continue
		}
		r.noteKey(keyArg(a))
		keys = append(keys, []byte(keyArg(a)))
	}
	var out []string
	if len(keys) > 0 {
		vals := make([][]byte, len(keys))
		if _, err := kr.GetMany(keys, vals, nil); err != nil {
			return errText(err)
		}
		for j, k := range keys {
			if vals[j] == nil {
				out = append(out, string(k)+": not found")
			} else {
				out = append(out, string(k)+"="+string(vals[j]))
			}
		}
	}
	if len(idx) > 0 {
		got := make([]bool, len(idx))
		br.GetMany(idx, got)
		for j, i := range idx {
			out = append(out, fmt.Sprintf("%d=%s", i, bit(got[j])))
		}
	}
	return strings.Join(out, "\n")
}

func (r *protoRig) scan(snap string, lo, hi *string, reverse bool) string {
	kr, _, err := r.readers(snap)
	if err != nil {
		return errText(err)
	}
	got, err := scanKV(kr, lo, hi, reverse)
	if err != nil {
		return errText(err)
	}
	if len(got) == 0 {
		return "(empty)"
	}
	return strings.Join(got, " ")
}

func scanKV(kr protoKVReader, lo, hi *string, reverse bool) ([]string, error) {
	it, err := kr.NewIter(bptr(lo), bptr(hi))
	if err != nil {
		return nil, err
	}
	var got []string
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	for ok := first(); ok; ok = next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	return got, it.Close()
}

func (r *protoRig) count(snap string) string {
	_, br, err := r.readers(snap)
	if err != nil {
		return errText(err)
	}
	return fmt.Sprintf("count %d, len %d", br.Count(), br.Len())
}

func (r *protoRig) ones(snap string, from uint64) string {
	_, br, err := r.readers(snap)
	if err != nil {
		return errText(err)
	}
	const limit = 1 << 20
	var got []uint64
	for i := range br.Ones(from) {
		got = append(got, i)
		if len(got) == limit {
			break
		}
	}
	if len(got) == 0 {
		return "(none)"
	}
	if len(got) == limit {
		return describeRuns(got) + fmt.Sprintf(" ... (stopped after %d)", limit)
	}
	return describeRuns(got)
}

// pending describes each overlay's view (active table, sealed tables newest
// first with the generation that froze them, 0 if none yet) and its
// pending counters, and checks that its account matches them.
func (r *protoRig) pending() string {
	var out []string
	if r.kv != nil {
		kv := r.kv.kv
		kv.vmu.Lock()
		v := kv.view.Load()
		var sealed []string
		for _, t := range v.sealed {
			sealed = append(sealed, fmt.Sprintf("g%d: %s", t.gen, summarizeKVTable(t)))
		}
		kv.vmu.Unlock()
		out = append(out, fmt.Sprintf("kv: active [%s], sealed [%s]; %s pending, %s",
			summarizeKVTable(v.active), strings.Join(sealed, "; "), plural(int(kv.PendingKeys()), "key"), showBytes(kv.PendingBytes())))
		if a, p := r.kv.acct.Bytes(), kv.PendingBytes(); a != p {
			out = append(out, fmt.Sprintf("kv: account %d != pending bytes %d", a, p))
		}
	}
	if r.bits != nil {
		b := r.bits.b
		b.vmu.Lock()
		v := b.view.Load()
		var sealed []string
		for _, t := range v.sealed {
			sealed = append(sealed, fmt.Sprintf("g%d: %s", t.gen, summarizeBitsTable(t)))
		}
		b.vmu.Unlock()
		out = append(out, fmt.Sprintf("bits: active [%s], sealed [%s]; pending %s, fast path %s, %s",
			summarizeBitsTable(v.active), strings.Join(sealed, "; "), yesNo(!v.active.empty() || len(v.sealed) > 0), onOff(b.direct()), showBytes(b.PendingBytes())))
		if a, p := r.bits.acct.Bytes(), b.PendingBytes(); a != p {
			out = append(out, fmt.Sprintf("bits: account %d != pending bytes %d", a, p))
		}
	}
	return strings.Join(out, "\n")
}

// durable describes what storage holds, under the overlays: the store's
// keys of the keyspace and its watermark, the bitslice file's set bits,
// length and watermark.
func (r *protoRig) durable() string {
	var out []string
	if r.kv != nil {
		it, err := r.kv.st.NewIter(1, nil, nil)
		if err != nil {
			return errText(err)
		}
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Close(); err != nil {
			return errText(err)
		}
		wm, err := r.kv.st.Watermark()
		if err != nil {
			return errText(err)
		}
		if len(got) == 0 {
			got = []string{"(empty)"}
		}
		out = append(out, fmt.Sprintf("store (watermark %d): %s", wm, strings.Join(got, " ")))
	}
	if r.bits != nil {
		f := r.bits.f
		var set []uint64
		for w := uint64(0); w<<6 < f.Len(); w++ {
			for word := f.Word(w); word != 0; word &= word - 1 {
				set = append(set, w<<6|uint64(bits.TrailingZeros64(word)))
			}
		}
		ones := "(none)"
		if len(set) > 0 {
			ones = describeRuns(set)
		}
		out = append(out, fmt.Sprintf("file (watermark %d, %d bits): %s", f.Watermark(), f.Len(), ones))
	}
	return strings.Join(out, "\n")
}

// --- consistency checks, run after every command ---

// check compares every read path of the live overlays and of every open
// snapshot over the keys and bits the script named: Get, GetMany, forward
// and backward scans (KV); Get, GetMany, Ones and Count (Bits).
func (r *protoRig) check(where string) {
	r.t.Helper()
	kr, br, _ := r.readers("")
	r.checkReaders(where, kr, br, r.keys)
	for _, s := range r.snaps {
		kr, br, _ := r.readers(s.name)
		r.checkReaders(where+", snapshot "+s.name, kr, br, r.keys)
	}
}

func (r *protoRig) checkReaders(where string, kr protoKVReader, br bitsReaderOnes, keys map[string]bool) {
	r.t.Helper()
	if kr != nil {
		r.checkKV(where, kr, keys)
	}
	if br != nil {
		r.checkBits(where, br)
	}
}

func (r *protoRig) checkKV(where string, kr protoKVReader, keys map[string]bool) {
	r.t.Helper()
	universe := make([]string, 0, len(keys))
	for k := range keys {
		universe = append(universe, k)
	}
	slices.Sort(universe)
	bkeys := make([][]byte, len(universe))
	for i, k := range universe {
		bkeys[i] = []byte(k)
	}
	vals := make([][]byte, len(bkeys))
	if _, err := kr.GetMany(bkeys, vals, nil); err != nil {
		if errors.Is(err, kverr.ErrClosed) {
			return
		}
		r.t.Errorf("%s: GetMany: %v", where, err)
		return
	}
	var want []string
	for i, k := range universe {
		v, err := kr.Get(bkeys[i])
		switch {
		case err == nil && (vals[i] == nil || string(vals[i]) != string(v)):
			r.t.Errorf("%s: Get(%q) = %q, GetMany %q", where, k, v, vals[i])
		case errors.Is(err, kverr.ErrNotFound) && vals[i] != nil:
			r.t.Errorf("%s: Get(%q) not found, GetMany %q", where, k, vals[i])
		case err != nil && !errors.Is(err, kverr.ErrNotFound):
			r.t.Errorf("%s: Get(%q): %v", where, k, err)
		}
		if err == nil {
			want = append(want, k+"="+string(v))
		}
	}
	fwd, err := scanKV(kr, nil, nil, false)
	if err != nil {
		r.t.Errorf("%s: scan: %v", where, err)
		return
	}
	if !slices.Equal(fwd, want) {
		r.t.Errorf("%s: scan %v, but Get finds %v", where, fwd, want)
	}
	back, err := scanKV(kr, nil, nil, true)
	if err != nil {
		r.t.Errorf("%s: reverse scan: %v", where, err)
		return
	}
	slices.Reverse(back)
	if !slices.Equal(back, want) {
		r.t.Errorf("%s: reverse scan %v, but Get finds %v", where, back, want)
	}
}

func (r *protoRig) checkBits(where string, br bitsReaderOnes) {
	r.t.Helper()
	const limit = 1 << 20
	set := map[uint64]bool{}
	prev := -1
	for i := range br.Ones(0) {
		if int(i) <= prev {
			r.t.Errorf("%s: Ones not increasing: %d after %d", where, i, prev)
			return
		}
		prev = int(i)
		set[i] = true
		if len(set) == limit {
			break
		}
	}
	if len(set) < limit && uint64(len(set)) != br.Count() {
		r.t.Errorf("%s: Count %d, Ones yields %d", where, br.Count(), len(set))
	}
	if prev >= 0 && uint64(prev) >= br.Len() {
		r.t.Errorf("%s: bit %d set at or past Len %d", where, prev, br.Len())
	}
	universe := make([]uint64, 0, len(r.idx))
	for i := range r.idx {
		universe = append(universe, i)
	}
	slices.Sort(universe)
	got := make([]bool, len(universe))
	br.GetMany(universe, got)
	for j, i := range universe {
		if g := br.Get(i); g != got[j] || (len(set) < limit && g != set[i]) {
			r.t.Errorf("%s: bit %d: Get %v, GetMany %v, in Ones %v", where, i, g, got[j], set[i])
		}
	}
}

// --- descriptions ---

func bit(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// showBytes says whether memory is held, not how much: the figure depends
// on the allocator's size classes and on pooling.
func showBytes(n int64) string {
	switch {
	case n > 0:
		return "bytes > 0"
	case n == 0:
		return "bytes 0"
	}
	return fmt.Sprintf("bytes %d (negative)", n)
}

// showSpan formats a range tombstone with the scripts' notation: "*" for
// an open bound (an open lower bound is the empty key, the smallest).
func showSpan(s span) string {
	lo, hi := s.lo, s.hi
	if lo == "" {
		lo = "*"
	}
	if s.open {
		hi = "*"
	}
	return fmt.Sprintf("[%s, %s)", lo, hi)
}

// kvTableEntries lists a table's range tombstones and its points in key
// order, as the flush writes them.
func kvTableEntries(t *table) (ranges, points []string) {
	sp := t.rdel.Load()
	for _, s := range sp.list() {
		ranges = append(ranges, showSpan(s))
	}
	x, ents := t.sortedKeys()
	for _, e := range ents {
		k := x.key(e.ref)
		sw, sh := x.words(e.ref)
		v, st := t.versionAt(sh, &sw, ^uint64(0))
		switch {
		case st != verFound:
			points = append(points, "(no version) "+k)
		case sp.hides(k, v.seq, ^uint64(0)):
			points = append(points, "(range deleted) "+k)
		case v.del:
			points = append(points, "delete "+k)
		default:
			var b [inlineBytes]byte
			val := v.ext
			if v.inline {
				val = inlineValue(&b, &sw, &v)
			}
			points = append(points, "put "+k+"="+string(val))
		}
	}
	return ranges, points
}

func describeKVTable(t *table) string {
	ranges, points := kvTableEntries(t)
	var parts []string
	if len(ranges) > 0 {
		parts = append(parts, "delete-range "+strings.Join(ranges, " "))
	}
	parts = append(parts, points...)
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, "; ")
}

func summarizeKVTable(t *table) string {
	ranges, points := kvTableEntries(t)
	if len(ranges) == 0 && len(points) == 0 {
		return "empty"
	}
	var parts []string
	if len(points) > 0 {
		parts = append(parts, plural(len(points), "key"))
	}
	if len(ranges) > 0 {
		parts = append(parts, "delete-range "+strings.Join(ranges, " "))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y") && !strings.HasSuffix(noun, "ey"):
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// bitsTableRuns returns a table's pending bits as runs of one value:
// "i=v" or "[lo, hi)=v".
func bitsTableRuns(t *bitsTable) []string {
	nw := (t.hi.Load() + 63) >> 6
	words, _ := t.appendWords(nil, 0, nw, int(nw)+1)
	var runs []string
	var lo, hi uint64 // current run [lo, hi)
	var val, open bool
	flushRun := func() {
		if !open {
			return
		}
		if hi-lo == 1 {
			runs = append(runs, fmt.Sprintf("%d=%s", lo, bit(val)))
		} else {
			runs = append(runs, fmt.Sprintf("[%d, %d)=%s", lo, hi, bit(val)))
		}
		open = false
	}
	for _, c := range words {
		for m := c.Mask; m != 0; m &= m - 1 {
			sh := uint64(bits.TrailingZeros64(m))
			i, v := c.Word<<6|sh, c.Bits>>sh&1 != 0
			if open && i == hi && v == val {
				hi++
				continue
			}
			flushRun()
			lo, hi, val, open = i, i+1, v, true
		}
	}
	flushRun()
	return runs
}

func describeBitsTable(t *bitsTable) string {
	runs := bitsTableRuns(t)
	if len(runs) == 0 {
		return "(empty)"
	}
	return strings.Join(runs, " ")
}

func summarizeBitsTable(t *bitsTable) string {
	if t.empty() {
		return "empty"
	}
	return describeBitsTable(t)
}

// describeRuns formats increasing indexes as runs: "3 5 [10, 20)".
func describeRuns(idx []uint64) string {
	var out []string
	for j := 0; j < len(idx); {
		k := j + 1
		for k < len(idx) && idx[k] == idx[k-1]+1 {
			k++
		}
		if k-j == 1 {
			out = append(out, strconv.FormatUint(idx[j], 10))
		} else {
			out = append(out, fmt.Sprintf("[%d, %d)", idx[j], idx[k-1]+1))
		}
		j = k
	}
	return strings.Join(out, " ")
}
