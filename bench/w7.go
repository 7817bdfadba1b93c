package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// W7 sizes at Scale 1 (doc/workloads.md).
const (
	w7KVReads    = 200_000 // W2 mixed lookups per get-mixed-under-writes round
	w7BitPasses  = 40      // passes over W1's 1,000,000 lookups per lookup-under-writes round
	w7FlushEvery = 10 * time.Millisecond
	w7Sample     = 64      // every 64th read and write is timed
	w7Writes     = 1 << 18 // pre-generated writes of each kind, cycled
)

// w7Rec collects a reader's sampled latencies.
type w7Rec struct {
	flushing *atomic.Bool
	lat      []time.Duration
	flushLat []time.Duration
}

// w7Target is one W7 implementation as the round driver sees it.
// readKV and readBits are the reader's whole phase (one call per round,
// its own loop); write does the n-th write of the writer; flush makes
// everything pending durable.
type w7Target interface {
	readKV(rec *w7Rec) (int64, error)
	readBits(rec *w7Rec) (int64, error)
	write(ctx context.Context, n int) error
	flush(ctx context.Context) error
	// getKey and getBit read back what the writer wrote (after the final
	// flush of a round).
	getKey(dst, key []byte) ([]byte, bool, error)
	getBit(i uint64) (bool, error)
}

// w7Input is what the reader reads and the writer writes, the same for
// every implementation.
type w7Input struct {
	kvKeys      flatKeys // reader: W2 mixed keys
	kvStored    flatKeys // the same in the store's key layout
	lookups     []uint64 // reader: W1 lookups
	passes      int
	wKeys       flatKeys // writer: KV changes (90% puts, 10% deletes)
	wVals       [][]byte
	wBits       []w1Change
	rate        int
	flushPeriod time.Duration
	readBackN   int // Config.ReadBack
}

// readBack reads back, with t's getters, a sample of the keys and bits
// the writer's first writes writes of a round left: each one's last write
// of the round (a put's value, a delete's absence, a Set's value).
func (in *w7Input) readBack(row string, t w7Target, writes int64) (int64, error) {
	lastKV := map[string]int{} // key -> its last KV write (index into wKeys)
	lastBit := map[uint64]int{}
	var kvOrder []string
	var bitOrder []uint64
	for n := range int(writes) {
		k := n / 2 % w7Writes
		if n%2 == 0 {
			key := string(in.wKeys.at(k))
			if _, ok := lastKV[key]; !ok {
				kvOrder = append(kvOrder, key)
			}
			lastKV[key] = k
			continue
		}
		i := in.wBits[k].i
		if _, ok := lastBit[i]; !ok {
			bitOrder = append(bitOrder, i)
		}
		lastBit[i] = k
	}
	round := uint64(writes)
	nk, err := readBackKV(row, readBackSample(len(kvOrder), in.readBackN, round),
		func(j int) []byte { return []byte(kvOrder[j]) },
		func(j int) []byte { return in.wVals[lastKV[kvOrder[j]]] }, t.getKey)
	if err != nil {
		return 0, err
	}
	nb, err := readBackBits(row, readBackSample(len(bitOrder), in.readBackN, round),
		func(j int) uint64 { return bitOrder[j] },
		func(j int) bool { return in.wBits[lastBit[bitOrder[j]]].v }, t.getBit)
	return nk + nb, err
}

// w7Kvbuf is the engine: reads take no lock, the writer writes through the
// engine's API, a flush is DB.Flush.
type w7Kvbuf struct {
	in   *w7Input
	db   *kvbuf.DB
	kv   *kvbuf.KV
	bits *kvbuf.Bits
}

func (x *w7Kvbuf) getKV(buf, k []byte) ([]byte, bool, error) {
	v, err := x.kv.GetAppend(buf[:0], k)
	if err != nil {
		if notFound(err) {
			return buf, false, nil
		}
		return buf, false, err
	}
	return v, true, nil
}

func (x *w7Kvbuf) readKV(rec *w7Rec) (int64, error) {
	buf := make([]byte, 0, 64)
	keys := x.in.kvKeys
	for i := range keys.len() {
		var err error
		if i%w7Sample == 0 {
			f := rec.flushing.Load()
			t0 := time.Now()
			buf, _, err = x.getKV(buf, keys.at(i))
			rec.add(time.Since(t0), f)
		} else {
			buf, _, err = x.getKV(buf, keys.at(i))
		}
		if err != nil {
			return int64(i), err
		}
	}
	return int64(keys.len()), nil
}

func (x *w7Kvbuf) readBits(rec *w7Rec) (int64, error) {
	var n int64
	var set int64
	for range x.in.passes {
		for j, i := range x.in.lookups {
			var v bool
			var err error
			if j%w7Sample == 0 {
				f := rec.flushing.Load()
				t0 := time.Now()
				v, err = x.bits.Get(i)
				rec.add(time.Since(t0), f)
			} else {
				v, err = x.bits.Get(i)
			}
			if err != nil {
				return n, err
			}
			set += b2i(v)
			n++
		}
	}
	_ = set
	return n, nil
}

func (x *w7Kvbuf) write(ctx context.Context, n int) error {
	k := n / 2 % w7Writes
	if n%2 == 0 {
		if v := x.in.wVals[k]; v != nil {
			return x.kv.Put(ctx, x.in.wKeys.at(k), v, 0)
		}
		return x.kv.Delete(ctx, x.in.wKeys.at(k), 0)
	}
	ch := x.in.wBits[k]
	return x.bits.Set(ctx, ch.i, ch.v, 0)
}

func (x *w7Kvbuf) flush(ctx context.Context) error { return x.db.Flush(ctx) }

func (x *w7Kvbuf) getKey(dst, key []byte) ([]byte, bool, error) { return kvbufGetter(x.kv)(dst, key) }

func (x *w7Kvbuf) getBit(i uint64) (bool, error) { return x.bits.Get(i) }

// w7Base is a baseline: a pending map per structure behind one lock each
// (sync.RWMutex, or sync.Mutex when rw is false) in front of raw pebble and
// the raw bitslice. Readers look in the active map, then in the map being
// flushed, then in storage; the writer takes the write lock; a flush swaps
// the active map out under the write lock, writes it (bits: set in the
// mapped slice and msync; KV: one synced pebble batch) without the lock,
// and drops it under the write lock.
type w7Base struct {
	in  *w7Input
	rw  bool
	pdb *pebble.DB
	raw *bitslice.File
	wm  *atomic.Uint64 // the raw file's watermark, shared by the baselines

	kvmu                 sync.Mutex
	kvrw                 sync.RWMutex
	kvActive, kvFlushing map[string][]byte // nil value: tombstone

	bmu                sync.Mutex
	brw                sync.RWMutex
	bActive, bFlushing map[uint64]bool
}

func (x *w7Base) rlockKV() {
	if x.rw {
		x.kvrw.RLock()
	} else {
		x.kvmu.Lock()
	}
}

func (x *w7Base) runlockKV() {
	if x.rw {
		x.kvrw.RUnlock()
	} else {
		x.kvmu.Unlock()
	}
}

func (x *w7Base) lockKV() {
	if x.rw {
		x.kvrw.Lock()
	} else {
		x.kvmu.Lock()
	}
}

func (x *w7Base) unlockKV() {
	if x.rw {
		x.kvrw.Unlock()
	} else {
		x.kvmu.Unlock()
	}
}

func (x *w7Base) rlockBits() {
	if x.rw {
		x.brw.RLock()
	} else {
		x.bmu.Lock()
	}
}

func (x *w7Base) runlockBits() {
	if x.rw {
		x.brw.RUnlock()
	} else {
		x.bmu.Unlock()
	}
}

func (x *w7Base) lockBits() {
	if x.rw {
		x.brw.Lock()
	} else {
		x.bmu.Lock()
	}
}

func (x *w7Base) unlockBits() {
	if x.rw {
		x.brw.Unlock()
	} else {
		x.bmu.Unlock()
	}
}

func (x *w7Base) getKV(buf []byte, i int) ([]byte, bool, error) {
	k := x.in.kvKeys.at(i)
	x.rlockKV()
	v, ok := x.kvActive[string(k)]
	if !ok && x.kvFlushing != nil {
		v, ok = x.kvFlushing[string(k)]
	}
	x.runlockKV()
	if ok {
		if v == nil {
			return buf, false, nil
		}
		return append(buf[:0], v...), true, nil
	}
	return pebbleGet(x.pdb, buf, x.in.kvStored.at(i))
}

// getKey reads a user key as a reader does: the maps, then storage.
func (x *w7Base) getKey(dst, key []byte) ([]byte, bool, error) {
	x.rlockKV()
	v, ok := x.kvActive[string(key)]
	if !ok && x.kvFlushing != nil {
		v, ok = x.kvFlushing[string(key)]
	}
	x.runlockKV()
	if ok {
		if v == nil {
			return dst, false, nil
		}
		return append(dst, v...), true, nil
	}
	return pebbleGetter(x.pdb)(dst, key)
}

func (x *w7Base) getBit(i uint64) (bool, error) { return x.getBitLocked(i), nil }

func (x *w7Base) getBitLocked(i uint64) bool {
	x.rlockBits()
	v, ok := x.bActive[i]
	if !ok && x.bFlushing != nil {
		v, ok = x.bFlushing[i]
	}
	x.runlockBits()
	if !ok {
		v = x.raw.Get(i)
	}
	return v
}

func (x *w7Base) readKV(rec *w7Rec) (int64, error) {
	buf := make([]byte, 0, 64)
	n := x.in.kvKeys.len()
	for i := range n {
		var err error
		if i%w7Sample == 0 {
			f := rec.flushing.Load()
			t0 := time.Now()
			buf, _, err = x.getKV(buf, i)
			rec.add(time.Since(t0), f)
		} else {
			buf, _, err = x.getKV(buf, i)
		}
		if err != nil {
			return int64(i), err
		}
	}
	return int64(n), nil
}

func (x *w7Base) readBits(rec *w7Rec) (int64, error) {
	var n, set int64
	for range x.in.passes {
		for j, i := range x.in.lookups {
			var v bool
			if j%w7Sample == 0 {
				f := rec.flushing.Load()
				t0 := time.Now()
				v = x.getBitLocked(i)
				rec.add(time.Since(t0), f)
			} else {
				v = x.getBitLocked(i)
			}
			set += b2i(v)
			n++
		}
	}
	_ = set
	return n, nil
}

func (x *w7Base) write(_ context.Context, n int) error {
	k := n / 2 % w7Writes
	if n%2 == 0 {
		key := x.in.wKeys.at(k)
		v := bytes.Clone(x.in.wVals[k]) // the map owns its value, as kvbuf copies it
		x.lockKV()
		x.kvActive[string(key)] = v
		x.unlockKV()
		return nil
	}
	ch := x.in.wBits[k]
	x.lockBits()
	x.bActive[ch.i] = ch.v
	x.unlockBits()
	return nil
}

func (x *w7Base) flush(context.Context) error {
	x.lockBits()
	fb := x.bActive
	x.bActive = make(map[uint64]bool, len(fb))
	x.bFlushing = fb
	x.unlockBits()
	if len(fb) > 0 {
		for i, v := range fb {
			if err := x.raw.Set(i, v); err != nil {
				return err
			}
		}
		x.raw.SetWatermark(x.wm.Add(1))
		if err := x.raw.Sync(); err != nil {
			return err
		}
	}
	x.lockBits()
	x.bFlushing = nil
	x.unlockBits()

	x.lockKV()
	fk := x.kvActive
	x.kvActive = make(map[string][]byte, len(fk))
	x.kvFlushing = fk
	x.unlockKV()
	if len(fk) > 0 {
		b := x.pdb.NewBatch()
		var sk []byte
		for k, v := range fk {
			sk = storedKey(sk[:0], []byte(k))
			var err error
			if v == nil {
				err = b.Delete(sk, nil)
			} else {
				err = b.Set(sk, v, nil)
			}
			if err != nil {
				return err
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return err
		}
		if err := b.Close(); err != nil {
			return err
		}
	}
	x.lockKV()
	x.kvFlushing = nil
	x.unlockKV()
	return nil
}

func (r *w7Rec) add(d time.Duration, flushing bool) {
	r.lat = append(r.lat, d)
	if flushing || r.flushing.Load() {
		r.flushLat = append(r.flushLat, d)
	}
}

// w7Round runs one W7 round of t: the reader runs its phase on this
// goroutine while one writer writes at in.rate writes per second and one
// flusher flushes every in.flushPeriod; then the writer and the flusher
// stop and a last flush (not timed) empties what is pending.
func w7Round(ctx context.Context, row string, in *w7Input, t w7Target, bits bool) (RoundResult, error) {
	var stop, flushing atomic.Bool
	rec := &w7Rec{flushing: &flushing}
	var wg sync.WaitGroup
	var writes int64
	var writeLat []time.Duration
	var werr, ferr error
	begin := time.Now()
	wg.Go(func() { // the writer
		interval := time.Second / time.Duration(max(in.rate, 1))
		n := 0
		for ; !stop.Load(); n++ {
			if n%w7Sample == 0 {
				if d := time.Until(begin.Add(time.Duration(n) * interval)); d > 0 {
					time.Sleep(d)
				}
				t0 := time.Now()
				werr = t.write(ctx, n)
				writeLat = append(writeLat, time.Since(t0))
			} else {
				werr = t.write(ctx, n)
			}
			if werr != nil {
				break
			}
		}
		writes = int64(n)
	})
	wg.Go(func() { // the flusher
		tick := time.NewTicker(in.flushPeriod)
		defer tick.Stop()
		for !stop.Load() {
			<-tick.C
			if stop.Load() {
				return
			}
			flushing.Store(true)
			ferr = t.flush(ctx)
			flushing.Store(false)
			if ferr != nil {
				return
			}
		}
	})
	c0, cok := processCPU()
	start := time.Now()
	var reads int64
	var err error
	if bits {
		reads, err = t.readBits(rec)
	} else {
		reads, err = t.readKV(rec)
	}
	elapsed := time.Since(start)
	c1, cok1 := processCPU()
	cpu, cpuOK := c1-c0, cok && cok1
	stop.Store(true)
	wg.Wait()
	if err = errors.Join(err, werr, ferr); err != nil {
		return RoundResult{}, err
	}
	// A reader done before the writer started (tiny scales) leaves nothing
	// to read back: the writer's first KV change and bit Set are made
	// now, not timed.
	for ; writes < 2; writes++ {
		if err := t.write(ctx, int(writes)); err != nil {
			return RoundResult{}, err
		}
	}
	if err := t.flush(ctx); err != nil {
		return RoundResult{}, fmt.Errorf("final flush: %w", err)
	}
	res := RoundResult{
		Ops: int(reads), Reads: reads, Writes: writes, Elapsed: elapsed, CPU: cpu, CPUMeasured: cpuOK,
		ReadLatencies: rec.lat, ReadFlushLatencies: rec.flushLat, WriteLatencies: writeLat,
	}
	res.ReadBack, err = in.readBack(row, t, writes)
	return res, err
}

// setupW7 builds W7 (reads under write load): an engine opened with
// default Options holding W2's stored keys (flushed) in a keyspace and
// W1's flushed Sets in a bitslice; raw pebble (opened like the engine's
// store, same stored keys) and a raw bitslice file with the same data for
// the two lock-based baselines, which share them (they never run at the
// same time, and every round ends with everything flushed).
func setupW7(ctx context.Context, s *Suite, c Config) error {
	nStored := c.scaled(w2Stored, 64)
	space := uint64(nStored) * 4
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+7))
	m, err := openMixedSides(s, "w7", nbits, nil)
	if err != nil {
		return err
	}
	var wm atomic.Uint64
	if err := w7Preload(ctx, m, nStored, w1Changes(rng, c.scaled(w1Sets, 16), nbits), &wm); err != nil {
		return err
	}
	in := w7Inputs(rng, c, space, nbits)
	in.readBackN = c.ReadBack
	engine := &w7Kvbuf{in: in, db: m.db, kv: m.kv, bits: m.bits}
	base := func(rw bool) *w7Base {
		return &w7Base{in: in, rw: rw, pdb: m.pdb, raw: m.raw, wm: &wm,
			kvActive: map[string][]byte{}, bActive: map[uint64]bool{}}
	}
	rwBase, muBase := base(true), base(false)
	impl := func(name string, t w7Target, bits bool) Impl {
		return Impl{Name: name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			return w7Round(ctx, name, in, t, bits)
		})}
	}
	quiesce := quiesceAll([]*kvbuf.DB{m.db}, m.pdb)
	s.add(
		&Workload{Name: "W7/get-mixed-under-writes", Unit: "read", NoCheck: true, Writes: true, quiesce: quiesce, Impls: []Impl{
			impl(ImplKvbuf, engine, false),
			impl(ImplMapPebble, rwBase, false),
			impl(ImplMutexMapPebble, muBase, false),
		}},
		&Workload{Name: "W7/lookup-under-writes", Unit: "read", NoCheck: true, Writes: true, quiesce: quiesce, Impls: []Impl{
			impl(ImplKvbuf, engine, true),
			impl(ImplRWMutexMap, rwBase, true),
			impl(ImplMutexMap, muBase, true),
			w7NoWriter(engine),
		}},
	)
	return nil
}

// w7Preload stores W2's keys in the engine and raw pebble and W1's Sets in
// the engine's bitslice and the raw file, and makes all of it durable.
func w7Preload(ctx context.Context, m mixedSides, nStored int, sets []w1Change, wm *atomic.Uint64) error {
	var op uint64
	pb := m.pdb.NewBatch()
	var kb, sk []byte
	for i := range uint64(nStored) {
		if err := cancelled(ctx, int(i)); err != nil {
			return err
		}
		kb = u64Key(kb[:0], i*4)
		v := w2StoredValue(i)
		op++
		if err := m.kv.Put(ctx, kb, v, op); err != nil {
			return err
		}
		if err := pb.Set(storedKey(sk[:0], kb), v, nil); err != nil {
			return err
		}
	}
	for k, ch := range sets {
		if err := cancelled(ctx, k); err != nil {
			return err
		}
		op++
		if err := m.bits.Set(ctx, ch.i, ch.v, op); err != nil {
			return err
		}
		if err := m.raw.Set(ch.i, ch.v); err != nil {
			return err
		}
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return err
	}
	if err := pb.Close(); err != nil {
		return err
	}
	if err := m.db.FlushMemtables(ctx); err != nil {
		return err
	}
	if err := m.pdb.Flush(); err != nil {
		return err
	}
	m.raw.SetWatermark(wm.Add(1))
	return m.raw.Sync()
}

// w7Inputs draws what W7's reader reads and its writer writes.
func w7Inputs(rng *rand.Rand, c Config, space, nbits uint64) *w7Input {
	in := &w7Input{rate: c.WriteRate, passes: w7BitPasses, flushPeriod: w7FlushEvery}
	nReads := c.scaled(w7KVReads, 64)
	in.kvKeys = newFlatKeys(8, nReads)
	for range nReads {
		in.kvKeys.b = u64Key(in.kvKeys.b, rng.Uint64N(space))
	}
	in.kvStored = in.kvKeys.stored()
	in.lookups = make([]uint64, c.scaled(w1Lookups, 16))
	for k := range in.lookups {
		in.lookups[k] = rng.Uint64N(nbits)
	}
	in.wKeys = newFlatKeys(8, w7Writes)
	for _, ch := range w2Changes(rng, w7Writes, space) {
		in.wKeys.b = u64Key(in.wKeys.b, ch.key)
		in.wVals = append(in.wVals, ch.val)
	}
	in.wBits = w1Changes(rng, w7Writes, nbits)
	return in
}
