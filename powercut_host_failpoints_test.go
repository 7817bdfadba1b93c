//go:build kvbuf_failpoints

package kvbuf

// The host of TestCrashPowerCut: concurrent writers with their own log
// (ops numbered under its lock, begun there, written as single calls or
// batches, ended), flushers in a loop and a checkpointer; its model of
// the state the log implies; and the check of an engine against it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	pcWriters = 3
	pcKeys    = 300     // keys per writer keyspace: k000 .. k299
	pcMaxBits = 1 << 20 // bit indexes stay below it
	pcShared  = "pshared"
)

func pcKS(w int) string         { return fmt.Sprintf("pw%d", w) }
func pcBS(w int) string         { return fmt.Sprintf("pb%d", w) }
func pcCreated(n uint64) string { return fmt.Sprintf("pc%d", n) }
func pcKey(i int) string        { return fmt.Sprintf("k%03d", i) }

// pcBitBound is the bound of the bit indexes op n uses: it widens with n,
// so that flushes keep growing the files.
func pcBitBound(n uint64) uint64 { return min(4096+16*n, pcMaxBits) }

// pcWrite is one write of an op. Every write of writer w touches only its
// keyspace, its bitslice, bits of the shared bitslice at indexes equal to
// w modulo pcWriters, and bitslices it creates: writers never write the
// same key or bit, so the state is that of the ops applied in op order,
// whatever the interleaving.
type pcWrite struct {
	kind   byte // 'p' Put, 'd' Delete, 'r' DeleteRange, 'x' DropKV, 's' Set, 'S' SetRange, 'c' Bits (create) and Set
	ks, bs string
	key    string
	value  string
	hi     string // r: upper bound
	lo     uint64 // s, S, c: the bit; S: [lo, hiBit)
	hiBit  uint64
	v      bool
}

// pcOp is op n of writer w.
type pcOp struct {
	n      uint64
	w      int
	batch  bool
	writes []pcWrite
}

// pcOpFor returns op n of writer w. It depends on n and w alone.
func pcOpFor(n uint64, w int) pcOp {
	r := rand.New(rand.NewPCG(n, 0x7063000+uint64(w)))
	op := pcOp{n: n, w: w, batch: r.IntN(2) == 0}
	bound := pcBitBound(n)
	ks, bs := pcKS(w), pcBS(w)
	for i := range 2 + r.IntN(4) {
		var x pcWrite
		switch k := r.IntN(100); {
		case k < 35:
			pad := r.IntN(30)
			if r.IntN(40) == 0 {
				pad = 1000 + r.IntN(3000)
			}
			x = pcWrite{kind: 'p', ks: ks, key: pcKey(r.IntN(pcKeys)), value: fmt.Sprintf("v%d.%d.", n, i) + strings.Repeat("x", pad)}
		case k < 45:
			x = pcWrite{kind: 'd', ks: ks, key: pcKey(r.IntN(pcKeys))}
		case k < 50:
			lo := r.IntN(pcKeys)
			x = pcWrite{kind: 'r', ks: ks, key: pcKey(lo), hi: pcKey(lo + 1 + r.IntN(20))}
		case k < 72:
			x = pcWrite{kind: 's', bs: bs, lo: r.Uint64N(bound), v: r.IntN(3) != 0}
		case k < 85:
			lo := r.Uint64N(bound)
			x = pcWrite{kind: 'S', bs: bs, lo: lo, hiBit: min(lo+1+r.Uint64N(500), bound), v: r.IntN(2) == 0}
		case k < 97:
			x = pcWrite{kind: 's', bs: pcShared, lo: uint64(w) + pcWriters*r.Uint64N(bound/pcWriters), v: r.IntN(3) != 0}
		default:
			x = pcWrite{kind: 'c', bs: pcCreated(n), lo: n % 64, v: true}
		}
		op.writes = append(op.writes, x)
	}
	if !op.batch && r.IntN(150) == 0 {
		at := r.IntN(len(op.writes) + 1)
		op.writes = slices.Insert(op.writes, at, pcWrite{kind: 'x', ks: ks})
	}
	return op
}

// pcApply writes op o to db, as the host does and as its replay does:
// one Batch, or single calls ended with EndOp. begun: the host began the op
// (BeginOp) under its log's lock; a replay does not.
func pcApply(ctx context.Context, db *DB, o pcOp) error {
	kvs := map[string]*KV{}
	kv := func(name string) (*KV, error) {
		if k, ok := kvs[name]; ok {
			return k, nil
		}
		k, err := db.KV(name)
		kvs[name] = k
		return k, err
	}
	if o.batch {
		b := db.NewBatch()
		for _, x := range o.writes {
			switch x.kind {
			case 'p', 'd', 'r':
				k, err := kv(x.ks)
				if err != nil {
					return err
				}
				switch x.kind {
				case 'p':
					b.Put(k, []byte(x.key), []byte(x.value))
				case 'd':
					b.Delete(k, []byte(x.key))
				case 'r':
					b.DeleteRange(k, []byte(x.key), []byte(x.hi))
				}
			case 's', 'S', 'c':
				bs, err := db.Bits(x.bs)
				if err != nil {
					return err
				}
				if x.kind == 'S' {
					b.SetRange(bs, x.lo, x.hiBit, x.v)
				} else {
					b.Set(bs, x.lo, x.v)
				}
			}
		}
		if err := b.Err(); err != nil {
			return err
		}
		return db.Apply(ctx, b, o.n)
	}
	for _, x := range o.writes {
		var err error
		switch x.kind {
		case 'p', 'd', 'r':
			var k *KV
			if k, err = kv(x.ks); err == nil {
				switch x.kind {
				case 'p':
					err = k.Put(ctx, []byte(x.key), []byte(x.value), o.n)
				case 'd':
					err = k.Delete(ctx, []byte(x.key), o.n)
				case 'r':
					err = k.DeleteRange(ctx, []byte(x.key), []byte(x.hi), o.n)
				}
			}
		case 'x':
			err = db.DropKV(ctx, x.ks, o.n)
			delete(kvs, x.ks)
		case 's', 'S', 'c':
			var bs *Bits
			if bs, err = db.Bits(x.bs); err == nil {
				if x.kind == 'S' {
					err = bs.SetRange(ctx, x.lo, x.hiBit, x.v, o.n)
				} else {
					err = bs.Set(ctx, x.lo, x.v, o.n)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("write %c: %w", x.kind, err)
		}
	}
	return db.EndOp(ctx, o.n)
}

// pcBits is a growable bitset.
type pcBits []uint64

func (b *pcBits) setRange(lo, hi uint64, v bool) {
	if need := int((hi + 63) / 64); len(*b) < need {
		*b = append(*b, make([]uint64, need-len(*b))...)
	}
	for i := lo; i < hi; {
		w := i >> 6
		end := min(hi, (w+1)<<6)
		m := ^uint64(0) >> (64 - (end - i)) << (i & 63)
		if v {
			(*b)[w] |= m
		} else {
			(*b)[w] &^= m
		}
		i = end
	}
}

func (b pcBits) word(w int) uint64 {
	if w < len(b) {
		return b[w]
	}
	return 0
}

// pcState is the state a log prefix implies: keyspaces (a dropped or
// never-written one is empty) and bitslices (those ever written).
type pcState struct {
	kv   map[string]map[string]string
	bits map[string]*pcBits
}

func newPCState() *pcState {
	return &pcState{kv: map[string]map[string]string{}, bits: map[string]*pcBits{}}
}

func (s *pcState) bs(name string) *pcBits {
	b := s.bits[name]
	if b == nil {
		b = &pcBits{}
		s.bits[name] = b
	}
	return b
}

func (s *pcState) apply(o pcOp) {
	for _, x := range o.writes {
		m := s.kv[x.ks]
		if m == nil && x.ks != "" {
			m = map[string]string{}
			s.kv[x.ks] = m
		}
		switch x.kind {
		case 'p':
			m[x.key] = x.value
		case 'd':
			delete(m, x.key)
		case 'r':
			for k := range m {
				if k >= x.key && k < x.hi {
					delete(m, k)
				}
			}
		case 'x':
			clear(m)
		case 's', 'c':
			s.bs(x.bs).setRange(x.lo, x.lo+1, x.v)
		case 'S':
			s.bs(x.bs).setRange(x.lo, x.hiBit, x.v)
		}
	}
}

// pcStateAt returns the state after ops 1..n of log.
func pcStateAt(log []pcOp, n uint64) *pcState {
	s := newPCState()
	for _, o := range log[:n] {
		s.apply(o)
	}
	return s
}

// pcLater is what ops after a watermark may have left in a crashed engine
// (a flush persists everything pending, so their writes can be there in
// any part): per keyspace key the values they wrote and whether one
// removed it; per bitslice the bits they set and cleared.
type pcLater struct {
	values  map[string]map[string]map[string]bool
	removes map[string][]pcWrite // 'd', 'r', 'x' writes per keyspace
	setT    map[string]*pcBits
	setF    map[string]*pcBits
}

func pcLaterOf(ops []pcOp) *pcLater {
	l := &pcLater{values: map[string]map[string]map[string]bool{}, removes: map[string][]pcWrite{},
		setT: map[string]*pcBits{}, setF: map[string]*pcBits{}}
	bs := func(m map[string]*pcBits, name string) *pcBits {
		if m[name] == nil {
			m[name] = &pcBits{}
		}
		return m[name]
	}
	for _, o := range ops {
		for _, x := range o.writes {
			switch x.kind {
			case 'p':
				if l.values[x.ks] == nil {
					l.values[x.ks] = map[string]map[string]bool{}
				}
				if l.values[x.ks][x.key] == nil {
					l.values[x.ks][x.key] = map[string]bool{}
				}
				l.values[x.ks][x.key][x.value] = true
			case 'd', 'r', 'x':
				l.removes[x.ks] = append(l.removes[x.ks], x)
			case 's', 'c', 'S':
				hi := x.lo + 1
				if x.kind == 'S' {
					hi = x.hiBit
				}
				m := l.setF
				if x.v {
					m = l.setT
				}
				bs(m, x.bs).setRange(x.lo, hi, true)
			}
		}
	}
	return l
}

func (l *pcLater) mayRemove(ks, key string) bool {
	for _, x := range l.removes[ks] {
		switch {
		case x.kind == 'x',
			x.kind == 'd' && x.key == key,
			x.kind == 'r' && key >= x.key && key < x.hi:
			return true
		}
	}
	return false
}

// pcRead reads db's state: every keyspace by a scan, every bitslice by
// Ones, checking Get and Count against them.
func pcRead(db *DB) (*pcState, error) {
	s := newPCState()
	for _, name := range db.Keyspaces() {
		k, err := db.KV(name)
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		it, err := k.NewIter(nil)
		if err != nil {
			return nil, err
		}
		for ok := it.First(); ok; ok = it.Next() {
			m[string(it.Key())] = string(it.Value())
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return nil, err
		}
		for key, v := range m {
			if got, err := k.Get([]byte(key)); err != nil || string(got) != v {
				return nil, fmt.Errorf("keyspace %s: Get(%s) = %.20q, %v; the scan read %.20q", name, key, got, err, v)
			}
		}
		s.kv[name] = m
	}
	for _, name := range db.Bitslices() {
		b, err := db.Bits(name)
		if err != nil {
			return nil, err
		}
		bs := s.bs(name)
		var ones uint64
		for i := range b.Ones(0) {
			bs.setRange(i, i+1, true)
			ones++
		}
		if c, err := b.Count(); err != nil || c != ones {
			return nil, fmt.Errorf("bitslice %s: Count = %d, %v; Ones found %d", name, c, err, ones)
		}
	}
	return s, nil
}

// pcCheckAt checks got, an engine's state at watermark wm, against base
// (the state after ops 1..wm) and later (what ops after wm wrote): every
// value is base's or one a later op wrote, every key base has and got
// lacks was removed by a later op, every bit is base's or one a later op
// wrote. This is "no wrong data under the watermark". It returns the first
// difference.
func pcCheckAt(wm uint64, got, base *pcState, later *pcLater) error {
	names := map[string]bool{}
	for n := range got.kv {
		names[n] = true
	}
	for n := range base.kv {
		names[n] = true
	}
	for _, ks := range slices.Sorted(maps.Keys(names)) {
		g, b := got.kv[ks], base.kv[ks]
		keys := map[string]bool{}
		for k := range g {
			keys[k] = true
		}
		for k := range b {
			keys[k] = true
		}
		for _, key := range slices.Sorted(maps.Keys(keys)) {
			gv, gok := g[key]
			bv, bok := b[key]
			switch {
			case gok == bok && gv == bv:
			case gok && later.values[ks][key][gv]:
			case !gok && later.mayRemove(ks, key):
			default:
				return fmt.Errorf("watermark %d: keyspace %s key %s is %.24q (present %v); the state at the watermark has %.24q (present %v), and no later op wrote that",
					wm, ks, key, gv, gok, bv, bok)
			}
		}
	}
	bnames := map[string]bool{}
	for n := range got.bits {
		bnames[n] = true
	}
	for n, b := range base.bits {
		bnames[n] = true
		if _, ok := got.bits[n]; !ok && len(*b) > 0 {
			// A bitslice an op at or below the watermark wrote is missing
			// (and with it what those ops set).
			if slices.ContainsFunc(*b, func(w uint64) bool { return w != 0 }) {
				return fmt.Errorf("watermark %d: bitslice %s is missing; ops at or below the watermark set bits in it", wm, n)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(bnames)) {
		g, b := pcBits{}, pcBits{}
		if x := got.bits[n]; x != nil {
			g = *x
		}
		if x := base.bits[n]; x != nil {
			b = *x
		}
		var lt, lf pcBits
		if x := later.setT[n]; x != nil {
			lt = *x
		}
		if x := later.setF[n]; x != nil {
			lf = *x
		}
		for w := range max(len(g), len(b)) {
			a, want := g.word(w), b.word(w)
			if bad := (a ^ want) &^ (a & lt.word(w)) &^ (^a & lf.word(w)); bad != 0 {
				i := uint64(w)<<6 + uint64(bits.TrailingZeros64(bad))
				return fmt.Errorf("watermark %d: bitslice %s bit %d = %v; the state at the watermark has %v, and no later op wrote that",
					wm, n, i, a>>(i&63)&1 == 1, want>>(i&63)&1 == 1)
			}
		}
	}
	return nil
}

// pcEqual compares two states exactly (an empty keyspace is an absent one;
// a bitslice with no bit set an absent one).
func pcEqual(got, want *pcState) error {
	names := map[string]bool{}
	for n := range got.kv {
		names[n] = true
	}
	for n := range want.kv {
		names[n] = true
	}
	for _, ks := range slices.Sorted(maps.Keys(names)) {
		g, w := got.kv[ks], want.kv[ks]
		if len(g) == 0 && len(w) == 0 {
			continue
		}
		if !maps.Equal(g, w) {
			for k, v := range w {
				if g[k] != v {
					return fmt.Errorf("keyspace %s key %s = %.24q, want %.24q", ks, k, g[k], v)
				}
			}
			for k, v := range g {
				if _, ok := w[k]; !ok {
					return fmt.Errorf("keyspace %s key %s = %.24q, want it absent", ks, k, v)
				}
			}
		}
	}
	bnames := map[string]bool{}
	for n := range got.bits {
		bnames[n] = true
	}
	for n := range want.bits {
		bnames[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(bnames)) {
		var g, w pcBits
		if x := got.bits[n]; x != nil {
			g = *x
		}
		if x := want.bits[n]; x != nil {
			w = *x
		}
		for i := range max(len(g), len(w)) {
			if d := g.word(i) ^ w.word(i); d != 0 {
				b := uint64(i)<<6 + uint64(bits.TrailingZeros64(d))
				return fmt.Errorf("bitslice %s bit %d = %v, want %v", n, b, g.word(i)&(d&-d) != 0, w.word(i)&(d&-d) != 0)
			}
		}
	}
	return nil
}

// pcHost runs the workload against one engine.
type pcHost struct {
	t  testing.TB
	db *DB

	mu  sync.Mutex // the log's lock: numbers ops, begins them
	log []pcOp     // log[n-1] is op n

	started atomic.Uint64 // the highest op numbered (set before it is begun)
	ackWM   atomic.Uint64 // the highest watermark a returned Flush reported

	cpMu   sync.Mutex
	cps    []pcCheckpoint // returned
	cpNext int

	stop     atomic.Bool
	wg       sync.WaitGroup
	errMu    sync.Mutex
	firstErr error
}

type pcCheckpoint struct {
	dir string // relative to the root
	wm  uint64
}

func (h *pcHost) fail(err error) {
	h.errMu.Lock()
	if h.firstErr == nil {
		h.firstErr = err
	}
	h.errMu.Unlock()
	h.stop.Store(true)
}

// writer is writer w's loop: number an op under the log's lock and begin
// it there, write it, end it.
func (h *pcHost) writer(ctx context.Context, w int) {
	for !h.stop.Load() {
		h.mu.Lock()
		n := uint64(len(h.log)) + 1
		o := pcOpFor(n, w)
		h.started.Store(n)
		err := h.db.BeginOp(ctx, n)
		if err == nil {
			h.log = append(h.log, o)
		}
		h.mu.Unlock()
		if err == nil {
			err = pcApply(ctx, h.db, o)
		}
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				h.fail(fmt.Errorf("writer %d: op %d: %w", w, n, err))
			}
			return
		}
	}
}

// flusher flushes in a loop and records the watermark each Flush left.
func (h *pcHost) flusher(ctx context.Context) {
	for !h.stop.Load() {
		if err := h.db.Flush(ctx); err != nil {
			if !errors.Is(err, ErrClosed) {
				h.fail(fmt.Errorf("flush: %w", err))
			}
			return
		}
		atomicMaxU64(&h.ackWM, h.db.Watermark())
	}
}

// checkpointer takes checkpoints into root/cps/cpN; prepare runs before
// each.
func (h *pcHost) checkpointer(ctx context.Context, root string, every func(), prepare func(dir string) error) {
	for !h.stop.Load() {
		every()
		if h.stop.Load() {
			return
		}
		h.cpMu.Lock()
		rel := fmt.Sprintf("cps/cp%03d", h.cpNext)
		h.cpNext++
		h.cpMu.Unlock()
		if err := prepare(root + "/" + rel); err != nil {
			h.fail(err)
			return
		}
		wm, err := h.db.Checkpoint(ctx, root+"/"+rel)
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				h.fail(fmt.Errorf("checkpoint %s: %w", rel, err))
			}
			return
		}
		h.cpMu.Lock()
		h.cps = append(h.cps, pcCheckpoint{dir: rel, wm: wm})
		h.cpMu.Unlock()
	}
}

func (h *pcHost) checkpoints() []pcCheckpoint {
	h.cpMu.Lock()
	defer h.cpMu.Unlock()
	return slices.Clone(h.cps)
}

func atomicMaxU64(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
