package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
)

// W2 sizes at Scale 1 (workloads.md).
const (
	w2Stored   = 1_048_576 // preloaded keys i*4, so the key space is 4×
	w2Pending  = 1_000_000 // pending puts/deletes, 90/10
	w2Lookups  = 1_000_000 // per get-* workload
	w2ValueLen = 16
	w2ScanLen  = 10_000
)

// quietLogger keeps pebble's informational output off stderr (pebble's
// default logger prints there); Fatalf keeps pebble's print-and-exit.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(string, ...any)             {}
func (quietLogger) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }

// w2Key encodes key number k as the workload's 8-byte big-endian key.
func w2Key(dst []byte, k uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, k)
}

// w2StoredValue is the preloaded value of stored key number i.
func w2StoredValue(i uint64) []byte {
	v := make([]byte, w2ValueLen)
	binary.BigEndian.PutUint64(v, i)
	binary.BigEndian.PutUint64(v[8:], ^i)
	return v
}

// w2Change is one pending change; a nil value is a delete.
type w2Change struct {
	key uint64
	val []byte
}

// flatKeys holds n 8-byte keys in one allocation.
type flatKeys []byte

func (f flatKeys) at(i int) []byte { return f[i*8 : i*8+8 : i*8+8] }

// setupW2 builds W2: a kvbuf engine keyspace and a raw pebble database with
// the same preloaded keys (flushed to sstables), the same pending changes
// in the engine, in a pebble indexed batch and in an RWMutex-guarded map,
// and the lookup keys of each get workload.
func setupW2(ctx context.Context, s *Suite, c Config) error {
	nStored := c.scaled(w2Stored, 64)
	space := uint64(nStored) * 4
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+2))

	db, err := kvbuf.Open(filepath.Join(s.dir, "engine"), engineOptions())
	if err != nil {
		return err
	}
	s.onClose(db.Close)
	kv, err := db.KV("w2")
	if err != nil {
		return err
	}
	pdb, err := pebble.Open(filepath.Join(s.dir, "pebble"), &pebble.Options{Logger: quietLogger{}, CacheSize: 8 << 20})
	if err != nil {
		return err
	}
	s.onClose(pdb.Close)

	// Preload both stores with the same keys, then move them to sstables.
	var op uint64
	pb := pdb.NewBatch()
	var kb []byte
	for i := range uint64(nStored) {
		kb = w2Key(kb[:0], i*4)
		v := w2StoredValue(i)
		op++
		if err := kv.Put(ctx, kb, v, op); err != nil {
			return err
		}
		if err := pb.Set(kb, v, nil); err != nil {
			return err
		}
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return err
	}
	if err := pb.Close(); err != nil {
		return err
	}
	if err := db.FlushMemtables(ctx); err != nil {
		return err
	}
	if err := pdb.Flush(); err != nil {
		return err
	}

	// The same pending changes everywhere. final records each key's last
	// change, to pick the lookup keys.
	ib := pdb.NewIndexedBatch()
	s.onClose(ib.Close)
	var rwmu sync.RWMutex
	pending := make(map[string][]byte) // nil value: tombstone
	final := make(map[uint64][]byte)
	for range c.scaled(w2Pending, 64) {
		ch := w2Change{key: rng.Uint64N(space)}
		if rng.IntN(10) != 0 {
			ch.val = make([]byte, w2ValueLen)
			for j := range ch.val {
				ch.val[j] = byte(rng.Uint32())
			}
		}
		kb = w2Key(kb[:0], ch.key)
		op++
		if ch.val == nil {
			err = kv.Delete(ctx, kb, op)
			if err == nil {
				err = ib.Delete(kb, nil)
			}
		} else {
			err = kv.Put(ctx, kb, ch.val, op)
			if err == nil {
				err = ib.Set(kb, ch.val, nil)
			}
		}
		if err != nil {
			return err
		}
		pending[string(kb)] = ch.val
		final[ch.key] = ch.val
	}
	var hits, tombs []uint64
	for k, v := range final {
		if v == nil {
			tombs = append(tombs, k)
		} else {
			hits = append(hits, k)
		}
	}
	if len(hits) == 0 || len(tombs) == 0 {
		return fmt.Errorf("%w: scale too small for W2 (%d pending hits, %d tombstones)", ErrBadConfig, len(hits), len(tombs))
	}
	// Map iteration order is random: sort for reproducible key lists.
	slices.Sort(hits)
	slices.Sort(tombs)
	nLookups := c.scaled(w2Lookups, 64)
	pick := func(draw func() uint64) flatKeys {
		f := make(flatKeys, 0, nLookups*8)
		for range nLookups {
			f = w2Key(f, draw())
		}
		return f
	}
	hitKeys := pick(func() uint64 { return hits[rng.IntN(len(hits))] })
	tombKeys := pick(func() uint64 { return tombs[rng.IntN(len(tombs))] })
	missKeys := pick(func() uint64 {
		for {
			k := rng.Uint64N(space)
			if _, ok := final[k]; !ok {
				return k
			}
		}
	})
	mixedKeys := pick(func() uint64 { return rng.Uint64N(space) })
	starts := make(flatKeys, 0, c.Scans*8)
	for range c.Scans {
		starts = w2Key(starts, rng.Uint64N(space-space/10))
	}

	found := func(err error) (int, error) {
		switch {
		case err == nil:
			return 1, nil
		case errors.Is(err, pebble.ErrNotFound), errors.Is(err, kvbuf.ErrNotFound):
			return 0, nil
		}
		return 0, err
	}
	// pebble returns values valid until the closer is closed: the baselines
	// copy them into a reused buffer, as a careful caller would; kvbuf
	// returns a copy the caller owns.
	pebbleGet := func(get func([]byte) ([]byte, io.Closer, error)) func(keys flatKeys) func(int) (int, error) {
		return func(keys flatKeys) func(int) (int, error) {
			var buf []byte
			return func(i int) (int, error) {
				v, cl, err := get(keys.at(i))
				if err != nil {
					return found(err)
				}
				buf = append(buf[:0], v...)
				return 1, cl.Close()
			}
		}
	}
	dbGet := pebbleGet(func(k []byte) ([]byte, io.Closer, error) { return pdb.Get(k) })
	batchGet := pebbleGet(func(k []byte) ([]byte, io.Closer, error) { return ib.Get(k) })
	mapGet := func(keys flatKeys) func(int) (int, error) {
		get := dbGet(keys)
		return func(i int) (int, error) {
			rwmu.RLock()
			v, ok := pending[string(keys.at(i))]
			rwmu.RUnlock()
			if ok {
				if v == nil {
					return 0, nil
				}
				return 1, nil
			}
			return get(i)
		}
	}
	gets := func(name string, keys flatKeys) *Workload {
		return &Workload{Name: name, Ops: nLookups, Impls: []Impl{
			{Name: ImplKvbuf, Op: func(i int) (int, error) {
				_, err := kv.Get(keys.at(i))
				return found(err)
			}},
			{Name: ImplPebbleGet, Floor: true, Op: dbGet(keys)},
			{Name: ImplPebbleIndexedBatch, Op: batchGet(keys)},
			{Name: ImplRWMutexMapPebble, Op: mapGet(keys)},
		}}
	}
	scanLen := w2ScanLen
	s.Workloads = []*Workload{
		gets("W2/get-pending-hit", hitKeys),
		gets("W2/get-pending-tombstone", tombKeys),
		gets("W2/get-miss", missKeys),
		gets("W2/get-mixed", mixedKeys),
		{Name: "W2/scan-10k", Ops: c.Scans, Impls: []Impl{
			{Name: ImplKvbuf, Op: func(i int) (int, error) {
				it, err := kv.NewIter(starts.at(i), nil)
				if err != nil {
					return 0, err
				}
				return scan(it, scanLen)
			}},
			{Name: ImplPebbleIndexedBatch, Op: func(i int) (int, error) {
				it, err := ib.NewIter(&pebble.IterOptions{LowerBound: starts.at(i)})
				if err != nil {
					return 0, err
				}
				return scan(it, scanLen)
			}},
		}},
	}
	return nil
}

// scanIter is what the scan rows need of kvbuf's and pebble's iterators.
type scanIter interface {
	First() bool
	Next() bool
	Value() []byte
	Error() error
	Close() error
}

// scan reads up to n entries of it (touching each value, as a reader
// would), closes it and returns how many it read.
func scan(it scanIter, n int) (int, error) {
	read, vb := 0, 0
	for ok := it.First(); ok && read < n; ok = it.Next() {
		read++
		vb += len(it.Value())
	}
	_ = vb
	return read, errors.Join(it.Error(), it.Close())
}
