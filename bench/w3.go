package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvbuf/kvbuf"
)

// W3 sizes at Scale 1 (doc/workloads.md).
const (
	w3Ops       = 1_000_000 // operations per round, over all goroutines
	w3Instances = 1_000     // W3/construct: instances built (and kept alive) per round
	w3ChurnKeys = 65_536    // distinct churn keys per goroutine
)

// w3Kind is what operation t of a scenario does.
type w3Kind uint8

const (
	w3SameKey w3Kind = iota // get key 0
	w3Hit                   // get key (g + t) mod n
	w3Churn                 // put then delete key n + g*65536 + t mod 65536
	w3Mixed                 // w3Hit for even t, w3Churn for odd t
)

// w3Scenario is one contended-table scenario: n preloaded keys and what
// each operation does. Keys are 8-byte big-endian numbers; values are the
// key's 8 bytes.
type w3Scenario struct {
	name string
	n    uint64
	kind w3Kind
}

var w3Scenarios = []w3Scenario{
	{"hit_same_key", 1, w3SameKey},
	{"hit_disjoint-64", 64, w3Hit},
	{"hit_disjoint-1024", 1024, w3Hit},
	{"miss_churn-64", 64, w3Churn},
	{"mixed-64", 64, w3Mixed},
}

// op returns whether operation t of goroutine g is a lookup (else a churn)
// and its key number.
func (sc *w3Scenario) op(g, t int) (hit bool, k uint64) {
	kind := sc.kind
	if kind == w3Mixed {
		kind = w3Hit
		if t&1 == 1 {
			kind = w3Churn
		}
	}
	switch kind {
	case w3SameKey:
		return true, 0
	case w3Hit:
		return true, (uint64(g) + uint64(t)) % sc.n
	}
	return false, sc.n + uint64(g)*w3ChurnKeys + uint64(t)%w3ChurnKeys
}

// w3Keys holds the preloaded keys of a scenario in each implementation's
// natural form (the hit keys are drawn from them, so no conversion is
// timed).
type w3Keys struct {
	b [][]byte
	s []string
	a []any
}

func newW3Keys(n uint64) *w3Keys {
	k := &w3Keys{}
	for i := range n {
		b := u64Key(nil, i)
		k.b = append(k.b, b)
		k.s = append(k.s, string(b))
		k.a = append(k.a, string(b))
	}
	return k
}

// The W3 implementations. A lookup copies the value into a reused buffer
// (as kvbuf's GetAppend does); a churn is a put (key and value copied) and
// a delete of a key not preloaded. A delete leaves a tombstone in every
// implementation (kvbuf keeps the deleted key pending until it is flushed;
// the maps store a nil value), so after the first 65,536 churns of a
// goroutine every put is an overwrite on both sides. Each counts one check
// per lookup that found its key and one per churn.
type (
	w3Kvbuf struct {
		sc *w3Scenario
		k  *w3Keys
		kv *kvbuf.KV
	}
	w3Mutex struct {
		sc *w3Scenario
		k  *w3Keys
		mu *sync.Mutex
		m  map[string][]byte
	}
	w3RWMutex struct {
		sc *w3Scenario
		k  *w3Keys
		mu *sync.RWMutex
		m  map[string][]byte
	}
	w3SyncMap struct {
		sc *w3Scenario
		k  *w3Keys
		m  *sync.Map
	}
	w3XsyncMap struct {
		sc *w3Scenario
		k  *w3Keys
		m  *xsync.Map[string, []byte]
	}
)

func (x w3Kvbuf) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
	ctx := context.Background()
	for t := lo; t < hi; t++ {
		hit, k := x.sc.op(g, t)
		if hit {
			v, err := x.kv.GetAppend(buf[:0], x.k.b[k])
			if err != nil {
				return n, err
			}
			buf = v
			n++
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		if err := x.kv.Put(ctx, kb[:], kb[:], 0); err != nil {
			return n, err
		}
		if err := x.kv.Delete(ctx, kb[:], 0); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (x w3Mutex) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
	for t := lo; t < hi; t++ {
		hit, k := x.sc.op(g, t)
		if hit {
			x.mu.Lock()
			v, ok := x.m[x.k.s[k]]
			x.mu.Unlock()
			if ok && v != nil {
				buf = append(buf[:0], v...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		x.mu.Lock()
		x.m[string(kb[:])] = bytes.Clone(kb[:])
		x.mu.Unlock()
		x.mu.Lock()
		x.m[string(kb[:])] = nil // a tombstone, as kvbuf keeps one
		x.mu.Unlock()
		n++
	}
	return n, nil
}

func (x w3RWMutex) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
	for t := lo; t < hi; t++ {
		hit, k := x.sc.op(g, t)
		if hit {
			x.mu.RLock()
			v, ok := x.m[x.k.s[k]]
			x.mu.RUnlock()
			if ok && v != nil {
				buf = append(buf[:0], v...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		x.mu.Lock()
		x.m[string(kb[:])] = bytes.Clone(kb[:])
		x.mu.Unlock()
		x.mu.Lock()
		x.m[string(kb[:])] = nil // a tombstone, as kvbuf keeps one
		x.mu.Unlock()
		n++
	}
	return n, nil
}

func (x w3SyncMap) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
	for t := lo; t < hi; t++ {
		hit, k := x.sc.op(g, t)
		if hit {
			if v, ok := x.m.Load(x.k.a[k]); ok && v.([]byte) != nil {
				buf = append(buf[:0], v.([]byte)...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		key := string(kb[:])
		x.m.Store(key, bytes.Clone(kb[:]))
		x.m.Store(key, []byte(nil)) // a tombstone, as kvbuf keeps one
		n++
	}
	return n, nil
}

func (x w3XsyncMap) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
	for t := lo; t < hi; t++ {
		hit, k := x.sc.op(g, t)
		if hit {
			if v, ok := x.m.Load(x.k.s[k]); ok && v != nil {
				buf = append(buf[:0], v...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		x.m.Store(string(kb[:]), bytes.Clone(kb[:]))
		x.m.Store(string(kb[:]), nil) // a tombstone, as kvbuf keeps one
		n++
	}
	return n, nil
}

// w3ReadBack is a W3 implementation that writes (the churn scenarios): a
// Looper whose ReadBack checks, after a round, that every preloaded key
// still holds its value and that the churn keys goroutine 0 put and
// deleted (a sample of them; every goroutine count runs a goroutine 0, and
// at most 4 goroutines leave it at least a quarter of the round) read as
// deleted.
type w3ReadBack struct {
	Looper
	name string
	sc   *w3Scenario
	k    *w3Keys
	ops  int
	want int // Config.ReadBack
	get  kvGetter
	r    uint64
}

func (x *w3ReadBack) ReadBack(context.Context) (int64, error) {
	x.r++
	n, err := readBackKV(x.name, readBackSample(len(x.k.b), x.want, x.r),
		func(i int) []byte { return x.k.b[i] }, func(i int) []byte { return x.k.b[i] }, x.get)
	if err != nil {
		return 0, err
	}
	var churned [][]byte
	for t := range min(x.ops/4, w3ChurnKeys) {
		if hit, k := x.sc.op(0, t); !hit {
			churned = append(churned, u64Key(nil, k))
		}
	}
	m, err := readBackKV(x.name, readBackSample(len(churned), x.want, x.r),
		func(i int) []byte { return churned[i] }, func(int) []byte { return nil }, x.get)
	return n + m, err
}

// mapGetter reads a W3 map through get (nil value: a tombstone).
func mapGetter(get func(key string) ([]byte, bool)) kvGetter {
	return func(dst, key []byte) ([]byte, bool, error) {
		v, ok := get(string(key))
		if !ok || v == nil {
			return dst, false, nil
		}
		return append(dst, v...), true, nil
	}
}

// w3Need is the pending memory W3's engines are sized for: the preloaded
// keys of every scenario plus the tombstones churn leaves (65,536 per
// goroutine and scenario, up to 4 goroutines).
func w3Need() int64 { return kvNeed(2 * 4 * w3ChurnKeys) }

// setupW3 builds W3: per scenario, a fresh engine keyspace and fresh maps,
// each preloaded with the scenario's keys (pending, never flushed: the
// engine runs without interval flushes and with a pending limit sized to
// the workload); for W3/hit_disjoint-64 also a keyspace in an engine with
// default Options; and W3/construct.
func setupW3(ctx context.Context, s *Suite, c Config) error {
	db, err := openEngine(s, "engine", pendingOptions(w3Need()))
	if err != nil {
		return err
	}
	def, err := openEngine(s, "engine-default", nil)
	if err != nil {
		return err
	}
	check := pendingGuard(db)
	ops := c.scaled(w3Ops, 64)
	for i := range w3Scenarios {
		w, err := w3Workload(ctx, db, def, &w3Scenarios[i], ops, c.ReadBack)
		if err != nil {
			return err
		}
		s.add(w)
	}
	if err := check(); err != nil {
		return err
	}
	s.add(w3Construct(s, c))
	return nil
}

// w3Workload builds one scenario: its keyspace (in def too for
// hit_disjoint-64, its default-Options row) and maps, preloaded.
func w3Workload(ctx context.Context, db, def *kvbuf.DB, sc *w3Scenario, ops, readBack int) (*Workload, error) {
	keys := newW3Keys(sc.n)
	kv, err := db.KV("w3-" + sc.name)
	if err != nil {
		return nil, err
	}
	var dkv *kvbuf.KV
	if sc.name == "hit_disjoint-64" {
		if dkv, err = def.KV("w3-" + sc.name); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex
	var rwmu sync.RWMutex
	mm, rwm := map[string][]byte{}, map[string][]byte{}
	var sm sync.Map
	xm := xsync.NewMap[string, []byte]()
	for j, b := range keys.b {
		for _, k := range []*kvbuf.KV{kv, dkv} {
			if k == nil {
				continue
			}
			if err := k.Put(ctx, b, b, 0); err != nil {
				return nil, err
			}
		}
		mm[keys.s[j]] = bytes.Clone(b)
		rwm[keys.s[j]] = bytes.Clone(b)
		sm.Store(keys.s[j], bytes.Clone(b))
		xm.Store(keys.s[j], bytes.Clone(b))
	}
	writes := sc.kind == w3Churn || sc.kind == w3Mixed
	impl := func(name string, l Looper, get kvGetter) Impl {
		if writes {
			l = &w3ReadBack{Looper: l, name: name, sc: sc, k: keys, ops: ops, want: readBack, get: get}
		}
		return Impl{Name: name, Loop: l}
	}
	im := []Impl{impl(ImplKvbuf, w3Kvbuf{sc, keys, kv}, kvbufGetter(kv))}
	if dkv != nil {
		im = append(im, impl(ImplKvbufDefault, w3Kvbuf{sc, keys, dkv}, kvbufGetter(dkv)))
	}
	im = append(im,
		impl(ImplMutexMap, w3Mutex{sc, keys, &mu, mm}, mapGetter(func(k string) ([]byte, bool) {
			mu.Lock()
			defer mu.Unlock()
			v, ok := mm[k]
			return v, ok
		})),
		impl(ImplRWMutexMap, w3RWMutex{sc, keys, &rwmu, rwm}, mapGetter(func(k string) ([]byte, bool) {
			rwmu.RLock()
			defer rwmu.RUnlock()
			v, ok := rwm[k]
			return v, ok
		})),
		impl(ImplSyncMap, w3SyncMap{sc, keys, &sm}, mapGetter(func(k string) ([]byte, bool) {
			v, ok := sm.Load(k)
			if !ok {
				return nil, false
			}
			return v.([]byte), true
		})),
		impl(ImplXsyncMap, w3XsyncMap{sc, keys, xm}, mapGetter(xm.Load)),
	)
	return &Workload{Name: "W3/" + sc.name, Unit: "op", Ops: ops, Parallel: true, Writes: writes, Impls: im}, nil
}

// w3Construct is W3/construct: one op builds an instance holding one key;
// a round builds w3Instances of them, keeps them alive and reports the
// live heap per instance. kvbuf's instance is a keyspace (DB.KV and one
// Put) in an engine opened for the round (not timed) and closed after it.
func w3Construct(s *Suite, c Config) *Workload {
	nInst := c.scaled(w3Instances, 16)
	one := u64Key(nil, 1)
	names := make([]string, nInst)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	construct := func(build func(i int) (any, error)) Rounder {
		return RoundFunc(func(context.Context, int) (RoundResult, error) {
			keep := make([]any, nInst)
			h0 := liveHeap()
			res := RoundResult{Ops: nInst, Checks: int64(nInst)}
			err := Timed(&res, func() error {
				for i := range keep {
					var err error
					if keep[i], err = build(i); err != nil {
						return err
					}
				}
				return nil
			})
			res.BytesPerEntry = perEntry(h0, liveHeap(), nInst)
			clear(keep)
			return res, err
		})
	}
	var rounds int
	kvbufRound := RoundFunc(func(ctx context.Context, g int) (RoundResult, error) {
		rounds++
		dir := filepath.Join(s.dir, fmt.Sprintf("construct-%d", rounds))
		db, err := kvbuf.Open(dir, nil)
		if err != nil {
			return RoundResult{}, err
		}
		res, err := construct(func(i int) (any, error) {
			kv, err := db.KV(names[i])
			if err == nil {
				err = kv.Put(ctx, one, one, 0)
			}
			return kv, err
		}).Round(ctx, g)
		return res, errors.Join(err, db.Close(), os.RemoveAll(dir))
	})
	return &Workload{Name: "W3/construct", Unit: "instance", Impls: []Impl{
		{Name: ImplKvbuf, Round: kvbufRound},
		{Name: ImplMutexMap, Round: construct(func(int) (any, error) {
			x := &struct {
				mu sync.Mutex
				m  map[string][]byte
			}{m: map[string][]byte{}}
			x.mu.Lock()
			x.m[string(one)] = bytes.Clone(one)
			x.mu.Unlock()
			return x, nil
		})},
		{Name: ImplRWMutexMap, Round: construct(func(int) (any, error) {
			x := &struct {
				mu sync.RWMutex
				m  map[string][]byte
			}{m: map[string][]byte{}}
			x.mu.Lock()
			x.m[string(one)] = bytes.Clone(one)
			x.mu.Unlock()
			return x, nil
		})},
		{Name: ImplSyncMap, Round: construct(func(int) (any, error) {
			m := &sync.Map{}
			m.Store(string(one), bytes.Clone(one))
			return m, nil
		})},
		{Name: ImplXsyncMap, Round: construct(func(int) (any, error) {
			m := xsync.NewMap[string, []byte]()
			m.Store(string(one), bytes.Clone(one))
			return m, nil
		})},
	}}
}
