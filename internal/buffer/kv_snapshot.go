package buffer

import (
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// KVSnapshot reads a keyspace as it was when the snapshot was taken: the
// pending tables of that instant (sealed, so immutable, and pinned) over a
// store snapshot taken at the same instant. Later writes and any number of
// flushes do not change what it reads. Safe for concurrent use.
type KVSnapshot struct {
	kv     *KV
	v      *kvView // fixed: every table sealed
	vis    uint64  // the visible sequence number of the instant
	tables []*table
	ss     kvReader
	closed atomic.Bool
}

// Snapshot seals the active table (if it holds changes), pins the tables of
// the view and returns a snapshot of the keyspace; SetStore then gives it
// the store snapshot to read beneath them, which must be taken after this
// call (a table released before the pin is in the store by then; one
// released after stays pinned). The caller must exclude writers (see KV)
// for the instant to be one, and Close the snapshot when done.
func (kv *KV) Snapshot() *KVSnapshot {
	kv.vmu.Lock()
	v := kv.view.Load()
	if a := v.active; !a.empty() {
		a.seal()
		v = kv.replaceActive(v)
	}
	ts := append([]*table(nil), v.sealed...)
	pinTables(ts)           // publication order 10: under vmu
	vis := kv.seq.Visible() // publication order 7c: after the pins
	kv.vmu.Unlock()
	s := &KVSnapshot{kv: kv, tables: ts, vis: vis}
	if len(ts) > 0 {
		s.v = &kvView{active: ts[0], sealed: ts[1:]}
	} else {
		s.v = &kvView{active: newTable(1, kv.seed)}
	}
	return s
}

// SetStore sets the store snapshot read beneath the pending tables (see
// KV.Snapshot). Until it is set, reads that reach the store return
// kverr.ErrClosed.
func (s *KVSnapshot) SetStore(ss *storage.Snapshot) {
	if ss != nil {
		s.ss = ss
	}
}

func (s *KVSnapshot) reader() kvReader {
	if s.closed.Load() {
		return nil
	}
	return s.ss
}

// Get is KV.Get as of the snapshot. After Close it returns kverr.ErrClosed.
func (s *KVSnapshot) Get(key []byte) ([]byte, error) { return ownCopy(s.GetAppend(nil, key)) }

// GetAppend is KV.GetAppend as of the snapshot.
func (s *KVSnapshot) GetAppend(dst, key []byte) ([]byte, error) {
	if err := s.kv.checkKey(key); err != nil {
		return dst, err
	}
	st := s.reader()
	if st == nil {
		return dst, kverr.ErrClosed
	}
	k := unsafe.String(unsafe.SliceData(key), len(key))
	h, kw := keyHash(k, s.kv.seed)
	// The snapshot's tables are sealed and pinned: nothing is rewritten
	// under it (probeRetry does not happen; see shard.reuse).
	out, kind := s.v.getAppend(dst, k, h, kw, s.vis)
	invariants.Check(kind != probeRetry, "buffer: a snapshot read raced a rewrite")
	switch kind {
	case probeValue:
		return out, nil
	case probeDeleted:
		return dst, kverr.ErrNotFound
	}
	return st.GetAppend(dst, s.kv.ks, key)
}

// GetMany is KV.GetMany as of the snapshot.
func (s *KVSnapshot) GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error) {
	st := s.reader()
	if st == nil {
		return buf, kverr.ErrClosed
	}
	if err := s.kv.checkMany(keys, vals); err != nil {
		return buf, err
	}
	start := len(buf)
	for {
		out, err := getMany(keys, vals, buf[:start], s.kv.seed, s.v, s.vis, st, s.kv.ks)
		if err != errReadAgain { // sealed, pinned tables: as GetAppend
			return out, err
		}
		invariants.Check(false, "buffer: a snapshot GetMany raced a rewrite")
	}
}

// NewIter is KV.NewIter as of the snapshot: it sees exactly the snapshot.
func (s *KVSnapshot) NewIter(lower, upper []byte) (*Iter, error) {
	if err := CheckRange(lower, upper); err != nil {
		return nil, err
	}
	st := s.reader()
	if st == nil {
		return nil, kverr.ErrClosed
	}
	// The snapshot's pins keep the tables from being recycled; the
	// iterator adds its own so that it stays correct if the snapshot is
	// closed first.
	pinTables(s.tables)
	sit, err := st.NewIter(s.kv.ks, lower, upper)
	if err != nil {
		unpinTables(s.tables)
		return nil, err
	}
	ts := s.tables
	return newIter(ts, s.vis, s.kv.orderOf, sit, lower, upper, func() { unpinTables(ts) }), nil
}

// Close releases the snapshot's tables. It is idempotent. The store snapshot
// is not the KVSnapshot's: its owner closes it.
func (s *KVSnapshot) Close() {
	if s.closed.CompareAndSwap(false, true) {
		unpinTables(s.tables)
	}
}

// pendingPresence is KV.pendingPresence as of the snapshot.
func (s *KVSnapshot) pendingPresence(key []byte) (has, known bool) {
	k := unsafe.String(unsafe.SliceData(key), len(key))
	pk := makeProbeKey(k, s.kv.seed)
	kind := s.v.presence(&pk, s.vis)
	invariants.Check(kind != probeRetry, "buffer: a snapshot presence check raced a rewrite")
	return kind == probeValue, kind != probeAbsent
}
