package bench

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidwall/btree"

	"github.com/kvbuf/kvbuf"
)

// W2 ordered-read sizes at Scale 1 (doc/workloads.md).
const (
	w2FirstIters     = 20  // first iterators per W2/first-iter-1m round
	w2Interleaved    = 200 // {100 puts, one 100-key scan} per W2/interleaved-puts-scans round
	w2InterleavedLen = 100 // puts and scanned keys of one interleaved op
)

// A scanner is an ordered view of W2's data (pending changes merged with
// the stored keys) that the scan rows read: the engine, pebble's indexed
// batch, or the B-tree merged with raw pebble. put adds a pending put (the
// interleaved and first-iterator rows write between scans); scan reads up
// to n entries from start, touching each value, and returns how many it
// read and the sum of their values' last bytes.
type scanner interface {
	put(ctx context.Context, key, val []byte) error
	scan(start []byte, n int) (read, sum int64, err error)
	// get reads one user key back (after a round that wrote).
	get(dst, key []byte) ([]byte, bool, error)
}

// scanKvbuf scans an engine keyspace with KV.NewIter.
type scanKvbuf struct {
	st *w2State
	kv *kvbuf.KV
}

func (x scanKvbuf) put(ctx context.Context, key, val []byte) error {
	x.st.op++ // only engine A gets these writes
	return x.kv.Put(ctx, key, val, x.st.op)
}

func (x scanKvbuf) get(dst, key []byte) ([]byte, bool, error) { return kvbufGetter(x.kv)(dst, key) }

func (x scanKvbuf) scan(start []byte, n int) (read, sum int64, err error) {
	it, err := x.kv.NewIter(&kvbuf.IterOptions{LowerBound: start})
	if err != nil {
		return 0, 0, err
	}
	for ok := it.First(); ok && read < int64(n); ok = it.Next() {
		read++
		v := it.Value()
		sum += int64(v[len(v)-1])
	}
	return read, sum, it.Close()
}

// scanBatch scans pebble's indexed batch holding the pending changes over
// raw pebble.
type scanBatch struct {
	st *w2State
}

func (x scanBatch) put(_ context.Context, key, val []byte) error {
	return x.st.ib.Set(storedKey(nil, key), val, nil)
}

func (x scanBatch) get(dst, key []byte) ([]byte, bool, error) {
	return pebbleGet(x.st.ib, dst, storedKey(nil, key))
}

func (x scanBatch) scan(start []byte, n int) (read, sum int64, err error) {
	it, err := x.st.ib.NewIter(&pebble.IterOptions{LowerBound: storedKey(nil, start), UpperBound: keyspaceEnd()})
	if err != nil {
		return 0, 0, err
	}
	for ok := it.First(); ok && read < int64(n); ok = it.Next() {
		read++
		v := it.Value()
		sum += int64(v[len(v)-1])
	}
	return read, sum, it.Close()
}

// scanBTree is the ordered in-memory baseline: the pending changes in a
// B-tree behind a sync.RWMutex, merged with a raw pebble iterator. A scan
// holds the read lock for its whole length (what keeps the B-tree's
// iterator valid); a put takes the write lock and copies key and value.
type scanBTree struct {
	st *w2State
}

func (x scanBTree) put(_ context.Context, key, val []byte) error {
	it := w2Item{string(key), append([]byte(nil), val...)}
	x.st.tmu.Lock()
	x.st.tree.Set(it)
	x.st.tmu.Unlock()
	return nil
}

func (x scanBTree) get(dst, key []byte) ([]byte, bool, error) {
	x.st.tmu.RLock()
	it, ok := x.st.tree.Get(w2Item{key: string(key)})
	x.st.tmu.RUnlock()
	if ok {
		if it.val == nil {
			return dst, false, nil
		}
		return append(dst, it.val...), true, nil
	}
	return pebbleGetter(x.st.pdb)(dst, key)
}

func (x scanBTree) scan(start []byte, n int) (read, sum int64, err error) {
	pit, err := x.st.pdb.NewIter(&pebble.IterOptions{LowerBound: storedKey(nil, start), UpperBound: keyspaceEnd()})
	if err != nil {
		return 0, 0, err
	}
	x.st.tmu.RLock()
	var bt btree.IterG[w2Item]
	bt.Init(x.st.tree, false)
	bok, pok := bt.Seek(w2Item{key: string(start)}), pit.First()
	// count reads v: a stored value is valid only until the pebble
	// iterator moves, so each branch counts before it advances.
	count := func(v []byte) {
		if v != nil { // nil: a pending tombstone
			read++
			sum += int64(v[len(v)-1])
		}
	}
	for read < int64(n) && (bok || pok) {
		switch {
		case bok && pok && bt.Item().key == string(pit.Key()[storedPrefix:]):
			count(bt.Item().val) // the pending change shadows the stored key
			bok, pok = bt.Next(), pit.Next()
		case bok && (!pok || bt.Item().key < string(pit.Key()[storedPrefix:])):
			count(bt.Item().val)
			bok = bt.Next()
		default:
			count(pit.Value())
			pok = pit.Next()
		}
	}
	bt.Release()
	x.st.tmu.RUnlock()
	return read, sum, pit.Close()
}

// scanners are the ordered views every scan workload races, the engine's
// first.
func (st *w2State) scanners() []struct {
	name string
	s    scanner
	heap float64
} {
	return []struct {
		name string
		s    scanner
		heap float64
	}{
		{ImplKvbuf, scanKvbuf{st, st.kv}, st.kvbufHeap},
		{ImplPebbleBatch, scanBatch{st}, st.ibHeap},
		{ImplBTreePebble, scanBTree{st}, st.treeHeap},
	}
}

// scanStarts draws n scan start keys uniform in the first 90% of the key
// space.
func scanStarts(rng *rand.Rand, n int, space uint64) flatKeys {
	f := newFlatKeys(8, n)
	for range n {
		f.b = u64Key(f.b, rng.Uint64N(space-space/10))
	}
	return f
}

// scanLoop is a scan workload's Looper: op i is one scan from starts[i].
type scanLoop struct {
	s      scanner
	starts flatKeys
	n      int
}

func (x scanLoop) Loop(_, lo, hi int) (int64, error) {
	var check int64
	for i := lo; i < hi; i++ {
		read, sum, err := x.s.scan(x.starts.at(i), x.n)
		if err != nil {
			return check, err
		}
		check += read<<8 + sum
	}
	return check, nil
}

// scanWorkload is W2/scan-10k.
func (st *w2State) scanWorkload(rng *rand.Rand, c Config, space uint64) *Workload {
	starts := scanStarts(rng, c.Scans, space)
	w := &Workload{Name: "W2/scan-10k", Unit: "scan", Ops: c.Scans}
	for _, sc := range st.scanners() {
		im := Impl{Name: sc.name, Loop: scanLoop{sc.s, starts, w2ScanLen}, BytesPerEntry: sc.heap}
		if sc.name == ImplKvbuf {
			im.AccountedBytes = st.kvbufAcct
		}
		w.Impls = append(w.Impls, im)
	}
	return w
}

// writeScanner is the state of one implementation of the rows that write
// between scans: how many rounds it has run, so that its round r writes
// the same keys and values as every other implementation's round r (each
// runs the same number of rounds, so all of them hold the same data
// whenever they are compared).
type writeScanner struct {
	s     scanner
	calls int
}

// w2Puts are the keys the rows that write between scans put, in order,
// cycled; the value of the j-th put of call r is (r, j), 16 bytes.
type w2Puts struct {
	keys flatKeys
	next int
}

func newW2Puts(rng *rand.Rand, n int, space uint64) *w2Puts {
	f := newFlatKeys(8, n)
	for range n {
		f.b = u64Key(f.b, rng.Uint64N(space))
	}
	return &w2Puts{keys: f}
}

// putAt puts key number j of call r with its value.
func (p *w2Puts) putAt(ctx context.Context, s scanner, r, j int, val []byte) error {
	return s.put(ctx, p.keys.at(j%p.keys.len()), p.value(val, r, j))
}

// value sets val to the value of put j of call r and returns it.
func (p *w2Puts) value(val []byte, r, j int) []byte {
	binary.BigEndian.PutUint64(val, uint64(r))
	binary.BigEndian.PutUint64(val[8:], uint64(j))
	return val
}

// readBack reads back, with s.get, a sample of the keys that puts [lo,
// hi) of call r wrote (each with its last value of the call).
func (p *w2Puts) readBack(row string, s scanner, r, lo, hi, want int) (int64, error) {
	last := map[string]int{}
	var order []string
	for j := lo; j < hi; j++ {
		k := string(p.keys.at(j % p.keys.len()))
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = j
	}
	val := make([]byte, w2ValueLen)
	return readBackKV(row, readBackSample(len(order), want, uint64(r)),
		func(i int) []byte { return []byte(order[i]) },
		func(i int) []byte { return p.value(val, r, last[order[i]]) }, s.get)
}

// firstIterWorkload is W2/first-iter-1m: the first iterator over the
// pending changes after a write. Each op puts one key (not timed) and then
// times opening an iterator, positioning it on its first key and closing
// it.
func (st *w2State) firstIterWorkload(rng *rand.Rand, c Config, space uint64) *Workload {
	reps := c.scaled(w2FirstIters, 4)
	puts := newW2Puts(rng, reps*64, space)
	starts := scanStarts(rng, reps, space)
	w := &Workload{Name: "W2/first-iter-1m", Unit: "first iterator"}
	for _, sc := range st.scanners() {
		ws := &writeScanner{s: sc.s}
		w.Impls = append(w.Impls, Impl{Name: sc.name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r := ws.calls
			ws.calls++
			res := RoundResult{Ops: reps}
			val := make([]byte, w2ValueLen)
			for i := range reps {
				if err := puts.putAt(ctx, ws.s, r, r*reps+i, val); err != nil {
					return res, err
				}
				var read, sum int64
				if err := Timed(&res, func() (err error) {
					read, sum, err = ws.s.scan(starts.at(i), 1)
					return err
				}); err != nil {
					return res, err
				}
				res.Checks += read<<8 + sum
			}
			return res, nil
		})})
	}
	return w
}

// interleavedWorkload is W2/interleaved-puts-scans: each op puts 100 keys
// (uniform over the key space, new 16-byte values) and then scans 100 keys
// from a uniform start, so that every scan follows writes. Everything is
// timed.
func (st *w2State) interleavedWorkload(rng *rand.Rand, c Config, space uint64) *Workload {
	reps := c.scaled(w2Interleaved, 4)
	puts := newW2Puts(rng, reps*w2InterleavedLen*8, space)
	starts := scanStarts(rng, reps, space)
	w := &Workload{Name: "W2/interleaved-puts-scans", Unit: "100 puts+scan", Writes: true}
	for _, sc := range st.scanners() {
		ws := &writeScanner{s: sc.s}
		name := sc.name
		w.Impls = append(w.Impls, Impl{Name: name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r := ws.calls
			ws.calls++
			res := RoundResult{Ops: reps}
			val := make([]byte, w2ValueLen)
			if err := Timed(&res, func() error {
				for i := range reps {
					for j := range w2InterleavedLen {
						if err := puts.putAt(ctx, ws.s, r, (r*reps+i)*w2InterleavedLen+j, val); err != nil {
							return err
						}
					}
					read, sum, err := ws.s.scan(starts.at(i), w2InterleavedLen)
					if err != nil {
						return err
					}
					res.Checks += read<<8 + sum
				}
				return nil
			}); err != nil {
				return res, err
			}
			var err error
			res.ReadBack, err = puts.readBack(name, ws.s, r, r*reps*w2InterleavedLen, (r+1)*reps*w2InterleavedLen, st.readBack)
			return res, err
		})})
	}
	return w
}
