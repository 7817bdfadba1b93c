package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginehook"
	"github.com/kvbuf/kvbuf/storage"
)

// engineOptions are the kvbuf options every suite opens engines with: no
// interval flush and no pending-memory bound, so that pending changes stay
// pending while they are measured and the flushes counted are the ones the
// workload asks for.
func engineOptions() *kvbuf.Options {
	return &kvbuf.Options{FlushInterval: -1, MaxPendingBytes: -1}
}

// openEngine opens a kvbuf engine in dir/name and registers its Close.
func openEngine(s *Suite, name string) (*kvbuf.DB, error) {
	db, err := kvbuf.Open(filepath.Join(s.dir, name), engineOptions())
	if err != nil {
		return nil, err
	}
	s.onClose(db.Close)
	return db, nil
}

// openPebble opens a raw pebble database in dir/name configured exactly
// like the engine's store (storage.PebbleOptions with the engine's
// defaults: the same block cache, memtable size, format and logger) and
// registers its Close.
func openPebble(s *Suite, name string) (*pebble.DB, error) {
	pdb, err := pebble.Open(filepath.Join(s.dir, name), storage.PebbleOptions(nil))
	if err != nil {
		return nil, err
	}
	s.onClose(pdb.Close)
	return pdb, nil
}

// createBits creates a raw bitslice file of n bits in dir/name and
// registers its Close.
func createBits(s *Suite, name string, n uint64) (*bitslice.File, error) {
	f, err := bitslice.Create(filepath.Join(s.dir, name), n)
	if err != nil {
		return nil, err
	}
	s.onClose(f.Close)
	return f, nil
}

// mixedSides is what W6 and W7 compare: an engine with one keyspace and
// one bitslice, both named ks, against raw pebble (opened like the
// engine's store) and a raw bitslice file of nbits.
type mixedSides struct {
	db   *kvbuf.DB
	kv   *kvbuf.KV
	bits *kvbuf.Bits
	pdb  *pebble.DB
	raw  *bitslice.File
}

func openMixedSides(s *Suite, ks string, nbits uint64) (m mixedSides, err error) {
	if m.db, err = openEngine(s, "engine"); err != nil {
		return m, err
	}
	if m.kv, err = m.db.KV(ks); err != nil {
		return m, err
	}
	if m.bits, err = m.db.Bits(ks); err != nil {
		return m, err
	}
	if m.pdb, err = openPebble(s, "pebble"); err != nil {
		return m, err
	}
	m.raw, err = createBits(s, "raw.bits", nbits)
	return m, err
}

// openStore opens a storage.Store in dir/name (for the buffer-overlay rows
// and baselines) and registers its Close.
func openStore(s *Suite, name string) (*storage.Store, error) {
	st, err := storage.Open(filepath.Join(s.dir, name), nil)
	if err != nil {
		return nil, err
	}
	s.onClose(st.Close)
	return st, nil
}

// userKeyTag is the storage package's tag byte for user keys (its
// documented key layout: [0x02][keyspace ID, 4 bytes big-endian][user key]).
const userKeyTag = 0x02

// storedKey appends the pebble key under which the engine's store keeps
// user key k of keyspace ks, so that raw pebble baselines hold and read
// exactly the keys the engine's store does.
func storedKey(dst []byte, ks storage.KeyspaceID, k []byte) []byte {
	dst = append(dst, userKeyTag)
	dst = binary.BigEndian.AppendUint32(dst, uint32(ks))
	return append(dst, k...)
}

// keyspaceEnd is the first stored key after keyspace ks.
func keyspaceEnd(ks storage.KeyspaceID) []byte {
	return storedKey(nil, ks+1, nil)
}

// engineKeyspace returns the storage keyspace id of an engine keyspace.
func engineKeyspace(kv *kvbuf.KV) storage.KeyspaceID { return enginehook.KeyspaceID(kv) }

// engineStore returns an engine's store (for reading back what a flush
// made durable).
func engineStore(db *kvbuf.DB) *storage.Store { return enginehook.Store(db) }

// u64Key encodes key number k as an 8-byte big-endian key.
func u64Key(dst []byte, k uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, k)
}

// flatKeys holds fixed-size keys in one allocation.
type flatKeys struct {
	b    []byte
	size int
}

func newFlatKeys(size, n int) flatKeys { return flatKeys{make([]byte, 0, size*n), size} }

func (f flatKeys) len() int { return len(f.b) / f.size }

func (f flatKeys) at(i int) []byte { return f.b[i*f.size : (i+1)*f.size : (i+1)*f.size] }

// slices returns a slice header per key (for GetMany), sharing f's memory.
func (f flatKeys) slices() [][]byte {
	out := make([][]byte, f.len())
	for i := range out {
		out[i] = f.at(i)
	}
	return out
}

// stored returns f's keys as the engine's store keeps them in keyspace ks.
func (f flatKeys) stored(ks storage.KeyspaceID) flatKeys {
	o := newFlatKeys(f.size+5, f.len())
	for i := range f.len() {
		o.b = storedKey(o.b, ks, f.at(i))
	}
	return o
}

// quiesceWait bounds how long quiescePebble waits for background work.
const quiesceWait = 30 * time.Second

// quiescePebble flushes pdb's memtables and waits until no flush or
// compaction is running (at most quiesceWait).
func quiescePebble(pdb *pebble.DB) error {
	if err := pdb.Flush(); err != nil {
		return err
	}
	deadline := time.Now().Add(quiesceWait)
	for time.Now().Before(deadline) {
		m := pdb.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// quiesceAll returns a quiesce step for a suite's engine and raw pebble
// database: the engine's memtables are flushed to sstables (the engine's
// store does not expose its compactions), pebble's too, and pebble's
// compactions are waited for.
func quiesceAll(db *kvbuf.DB, pdb *pebble.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := db.FlushMemtables(ctx); err != nil {
			return err
		}
		return quiescePebble(pdb)
	}
}

// liveHeap returns the live heap in bytes after two garbage collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// perEntry is the heap growth from h0 to h1 divided by n entries.
func perEntry(h0, h1 uint64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return (float64(h1) - float64(h0)) / float64(n)
}

// notFound reports whether err is a lookup miss of kvbuf or pebble.
func notFound(err error) bool {
	return err == kvbuf.ErrNotFound || errors.Is(err, pebble.ErrNotFound) || errors.Is(err, kvbuf.ErrNotFound)
}

// errWrongAnswer is returned by a round that read something it should not
// have (a setup or implementation bug).
var errWrongAnswer = errors.New("bench: wrong answer")

func wrongAnswer(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errWrongAnswer}, args...)...)
}
