package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidwall/btree"

	"github.com/kvbuf/kvbuf"
)

// W2/gc-1m sizes at Scale 1 (doc/workloads.md).
const (
	w2GCEntries = 1_000_000 // distinct keys pending
	w2GCs       = 3         // timed collections per round
)

// w2Held is one structure holding W2/gc-1m's entries, built untimed at the
// start of a round and released at its end.
type w2Held interface {
	// entries returns how many entries it holds and, for the engine, its
	// own pending bytes per entry (0 otherwise).
	entries() (n int, accounted float64)
	release() error
}

type (
	heldEngine struct {
		db  *kvbuf.DB
		dir string
	}
	heldMap  map[string][]byte
	heldTree struct{ t *btree.BTreeG[w2Item] }
	heldIB   struct{ b *pebble.Batch }
)

func (h heldEngine) entries() (int, float64) {
	m := h.db.Metrics()
	return int(m.PendingKeys), float64(m.PendingBytes) / float64(max(m.PendingKeys, 1))
}

func (h heldEngine) release() error {
	err := h.db.Close()
	if rerr := os.RemoveAll(h.dir); err == nil {
		err = rerr
	}
	return err
}

func (h heldMap) entries() (int, float64)  { return len(h), 0 }
func (h heldMap) release() error           { return nil }
func (h heldTree) entries() (int, float64) { return h.t.Len(), 0 }
func (h heldTree) release() error          { return nil }
func (h heldIB) entries() (int, float64) {
	return int(h.b.Count()), 0
}
func (h heldIB) release() error { return h.b.Close() }

// setupW2Memory builds W2/gc-1m: what keeping W2's pending entries costs
// the garbage collector and the live heap. Each round of an implementation
// builds its structure holding the same 1,000,000 distinct 8-byte keys
// (90% with a random 16-byte value, 10% deletes) from scratch (not timed),
// collects garbage once (not timed), then times w2GCs calls of
// runtime.GC() (one op is one collection) and releases the structure. The
// row also reports the live heap the structure added, per entry. Nothing
// else of the benchmark is alive in the process meanwhile (kvtool bench
// runs one suite at a time).
func setupW2Memory(_ context.Context, s *Suite, c Config) error {
	n := c.scaled(w2GCEntries, 64)
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+22))
	keys := u64Keys(distinct(rng, n, uint64(c.scaled(w2Stored, 64))*4))
	vals := make([][]byte, n)
	for i := range vals {
		vals[i] = w2Value(rng)
	}
	pdb, err := openPebble(s, "pebble", 0, baselineCache(nil))
	if err != nil {
		return err
	}
	build := w2MemoryBuilders(s, pdb, keys, vals)
	w := &Workload{Name: "W2/gc-1m", Unit: "GC"}
	for _, name := range []string{ImplKvbuf, ImplRWMutexMap, ImplRWMutexBTree, ImplPebbleBatch} {
		w.Impls = append(w.Impls, Impl{Name: name, Round: gcRound(build[name])})
	}
	s.add(w)
	return nil
}

// w2MemoryBuilders returns, per implementation, how to build its structure
// holding keys with vals (a nil value: a delete). The engine is a fresh one
// in the suite's directory each time, removed by release.
func w2MemoryBuilders(s *Suite, pdb *pebble.DB, keys flatKeys, vals [][]byte) map[string]func(context.Context) (w2Held, error) {
	var engines int
	n := keys.len()
	return map[string]func(ctx context.Context) (w2Held, error){
		ImplKvbuf: func(ctx context.Context) (w2Held, error) {
			engines++
			dir := filepath.Join(s.dir, fmt.Sprintf("engine-%d", engines))
			db, err := kvbuf.Open(dir, pendingOptions(kvNeed(n)))
			if err != nil {
				return nil, err
			}
			kv, err := db.KV("w2")
			if err != nil {
				return nil, errors.Join(err, db.Close())
			}
			h := heldEngine{db, dir}
			check := pendingGuard(db)
			for i := range n {
				if err := cancelled(ctx, i); err == nil {
					if vals[i] == nil {
						err = kv.Delete(ctx, keys.at(i), uint64(i+1))
					} else {
						err = kv.Put(ctx, keys.at(i), vals[i], uint64(i+1))
					}
				}
				if err != nil {
					return nil, errors.Join(err, h.release())
				}
			}
			if err := check(); err != nil {
				return nil, errors.Join(err, h.release())
			}
			return h, nil
		},
		ImplRWMutexMap: func(context.Context) (w2Held, error) {
			m := make(heldMap)
			for i := range n {
				m[string(keys.at(i))] = bytes.Clone(vals[i])
			}
			return m, nil
		},
		ImplRWMutexBTree: func(context.Context) (w2Held, error) {
			t := newW2Tree()
			for i := range n {
				t.Set(w2Item{string(keys.at(i)), bytes.Clone(vals[i])})
			}
			return heldTree{t}, nil
		},
		ImplPebbleBatch: func(context.Context) (w2Held, error) {
			b := pdb.NewIndexedBatch()
			var sk []byte
			for i := range n {
				sk = storedKey(sk[:0], keys.at(i))
				var err error
				if vals[i] == nil {
					err = b.Delete(sk, nil)
				} else {
					err = b.Set(sk, vals[i], nil)
				}
				if err != nil {
					return nil, errors.Join(err, b.Close())
				}
			}
			return heldIB{b}, nil
		},
	}
}

// gcRound is one W2/gc-1m round over the structure build makes.
func gcRound(build func(context.Context) (w2Held, error)) Rounder {
	return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
		h0 := liveHeap()
		h, err := build(ctx)
		if err != nil {
			return RoundResult{}, err
		}
		h1 := liveHeap() // also the untimed first collection
		n, acct := h.entries()
		res := RoundResult{Ops: w2GCs, Checks: int64(n), BytesPerEntry: perEntry(h0, h1, n), AccountedBytes: acct}
		err = Timed(&res, func() error {
			for range w2GCs {
				runtime.GC()
			}
			return nil
		})
		return res, errors.Join(err, h.release())
	})
}
