package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/storage"
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
// a delete of a key not preloaded. Each counts one check per lookup that
// found its key and one per churn.
type (
	w3Kvbuf struct {
		sc *w3Scenario
		k  *w3Keys
		kv *kvbuf.KV
	}
	w3Overlay struct {
		sc *w3Scenario
		k  *w3Keys
		kv *buffer.KV
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

func (x w3Overlay) Loop(g, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 16)
	var kb [8]byte
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
		if err := x.kv.Put(kb[:], kb[:]); err != nil {
			return n, err
		}
		if err := x.kv.Delete(kb[:]); err != nil {
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
			if ok {
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
		delete(x.m, string(kb[:]))
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
			if ok {
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
		delete(x.m, string(kb[:]))
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
			if v, ok := x.m.Load(x.k.a[k]); ok {
				buf = append(buf[:0], v.([]byte)...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		key := string(kb[:])
		x.m.Store(key, bytes.Clone(kb[:]))
		x.m.Delete(key)
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
			if v, ok := x.m.Load(x.k.s[k]); ok {
				buf = append(buf[:0], v...)
				n++
			}
			continue
		}
		binary.BigEndian.PutUint64(kb[:], k)
		x.m.Store(string(kb[:]), bytes.Clone(kb[:]))
		x.m.Delete(string(kb[:]))
		n++
	}
	return n, nil
}

// setupW3 builds W3: per scenario, a fresh engine keyspace, a fresh buffer
// overlay (over one storage.Store, one keyspace id per scenario) and fresh
// maps, each preloaded with the scenario's keys (pending, never flushed:
// the engine runs with no interval flush and no memory bound).
func setupW3(ctx context.Context, s *Suite, c Config) error {
	db, err := openEngine(s, "engine")
	if err != nil {
		return err
	}
	st, err := openStore(s, "store")
	if err != nil {
		return err
	}
	ops := c.scaled(w3Ops, 64)
	for i := range w3Scenarios {
		sc := &w3Scenarios[i]
		keys := newW3Keys(sc.n)
		kv, err := db.KV("w3-" + sc.name)
		if err != nil {
			return err
		}
		ov, err := buffer.NewKV(st, storage.KeyspaceID(i+1), nil, nil)
		if err != nil {
			return err
		}
		var mu sync.Mutex
		var rwmu sync.RWMutex
		mm, rwm := map[string][]byte{}, map[string][]byte{}
		var sm sync.Map
		xm := xsync.NewMap[string, []byte]()
		for j, b := range keys.b {
			if err := kv.Put(ctx, b, b, 0); err != nil {
				return err
			}
			if err := ov.Put(b, b); err != nil {
				return err
			}
			mm[keys.s[j]] = bytes.Clone(b)
			rwm[keys.s[j]] = bytes.Clone(b)
			sm.Store(keys.s[j], bytes.Clone(b))
			xm.Store(keys.s[j], bytes.Clone(b))
		}
		s.add(&Workload{Name: "W3/" + sc.name, Unit: "op", Ops: ops, Parallel: true, Impls: []Impl{
			{Name: ImplKvbuf, Loop: w3Kvbuf{sc, keys, kv}},
			{Name: ImplKvbufOverlay, Loop: w3Overlay{sc, keys, ov}},
			{Name: ImplMutexMap, Loop: w3Mutex{sc, keys, &mu, mm}},
			{Name: ImplRWMutexMap, Loop: w3RWMutex{sc, keys, &rwmu, rwm}},
			{Name: ImplSyncMap, Loop: w3SyncMap{sc, keys, &sm}},
			{Name: ImplXsyncMap, Loop: w3XsyncMap{sc, keys, xm}},
		}})
	}

	// construct: build w3Instances instances each holding one key, keep them
	// alive, and measure the live heap per instance.
	nInst := c.scaled(w3Instances, 16)
	one := u64Key(nil, 1)
	construct := func(build func() any) Rounder {
		return RoundFunc(func(context.Context, int) (RoundResult, error) {
			keep := make([]any, nInst)
			h0 := liveHeap()
			res := RoundResult{Ops: nInst, Checks: int64(nInst)}
			_ = Timed(&res, func() error {
				for i := range keep {
					keep[i] = build()
				}
				return nil
			})
			res.BytesPerEntry = perEntry(h0, liveHeap(), nInst)
			clear(keep)
			return res, nil
		})
	}
	ksOverlay := storage.KeyspaceID(len(w3Scenarios) + 1)
	var buildErr error
	s.add(&Workload{Name: "W3/construct", Unit: "instance", Impls: []Impl{
		{Name: ImplKvbufOverlay, Round: RoundFunc(func(ctx context.Context, g int) (RoundResult, error) {
			r, err := construct(func() any {
				ov, err := buffer.NewKV(st, ksOverlay, nil, nil)
				if err == nil {
					err = ov.Put(one, one)
				}
				if err != nil && buildErr == nil {
					buildErr = err
				}
				return ov
			}).Round(ctx, g)
			if buildErr != nil {
				return r, buildErr
			}
			return r, err
		})},
		{Name: ImplMutexMap, Round: construct(func() any {
			x := &struct {
				mu sync.Mutex
				m  map[string][]byte
			}{m: map[string][]byte{}}
			x.mu.Lock()
			x.m[string(one)] = bytes.Clone(one)
			x.mu.Unlock()
			return x
		})},
		{Name: ImplRWMutexMap, Round: construct(func() any {
			x := &struct {
				mu sync.RWMutex
				m  map[string][]byte
			}{m: map[string][]byte{}}
			x.mu.Lock()
			x.m[string(one)] = bytes.Clone(one)
			x.mu.Unlock()
			return x
		})},
		{Name: ImplSyncMap, Round: construct(func() any {
			m := &sync.Map{}
			m.Store(string(one), bytes.Clone(one))
			return m
		})},
		{Name: ImplXsyncMap, Round: construct(func() any {
			m := xsync.NewMap[string, []byte]()
			m.Store(string(one), bytes.Clone(one))
			return m
		})},
	}})
	return nil
}
