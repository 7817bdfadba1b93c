package raftkv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf/storage"
)

// logStore is a node's raft log and raft state in its own pebble database
// (Dir/log), separate from the engine. It implements raft.Storage. Keys:
//
//	0x01 "hardstate"       raftpb.HardState
//	0x01 "trunc"           index u64 | term u64 of the last compacted entry (the log's base)
//	0x01 "engine"          the name of the live engine directory under Dir
//	0x01 "removed"         present once this node applied its own removal
//	0x02 index (8 bytes BE) membership as of that index (see membership)
//	0x03 index (8 bytes BE) raftpb.Entry
//
// All integers in values are little-endian. Writes that raft requires to be
// durable before messages go out (entries, term and vote) are committed
// with a sync; a HardState whose only change is the commit index is not
// (raft's MustSync), which is why the host restarts raft at
// min(engine watermark, HardState.Commit) (etcd-io/etcd#10217).
//
// raft calls the raft.Storage methods while the host's Ready loop appends,
// installs snapshots and compacts: mu guards the in-memory state and orders
// those against each other. A change that removes entries (a compaction, a
// snapshot install) commits its batch and moves the log's base in one
// critical section, as raft.MemoryStorage.Compact does: raft never sees the
// entries gone while the base still says they are there (the gap that made
// Entries report "entry N found where M was expected" to a leader, which
// raft turns into a panic). An append (save) commits outside mu: it only
// adds entries past the last index raft reads from this store, or replaces
// a suffix raft holds in its own unstable log and does not read from here.
type logStore struct {
	db *pebble.DB

	mu         sync.Mutex
	hs         *raftpb.HardState
	truncIndex uint64 // the log's base: entries > truncIndex are present
	truncTerm  uint64
	last       uint64 // last entry index (truncIndex if none)
	// cache holds the newest entries, contiguous and ending at last: cache[i]
	// has index cacheStart+i. raft mostly reads what it just appended.
	cache      []*raftpb.Entry
	cacheStart uint64
	// initConf is what InitialState returns: the membership as of the
	// index raft restarts from (set by the host before raft starts).
	initConf *raftpb.ConfState
	snapConf *raftpb.ConfState // the newest membership, for Snapshot

	// testHook, if set, is called inside the critical sections of compact
	// and installSnapshot, between their steps (the tests stop them there
	// and call the raft.Storage methods).
	testHook func(step string)
}

const maxCachedEntries = 8192

var (
	keyHardState = []byte("\x01hardstate")
	keyTrunc     = []byte("\x01trunc")
	keyEngine    = []byte("\x01engine")
	keyRemoved   = []byte("\x01removed")
)

const (
	prefixMembership = 0x02
	prefixEntry      = 0x03
)

func indexKey(prefix byte, i uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

func entryKey(i uint64) []byte { return indexKey(prefixEntry, i) }

// membership is the cluster configuration as of an index: raft's ConfState,
// the address of every member (conf changes carry them), the IDs removed
// so far (their messages are answered 410 Gone, which tells a removed node
// that missed its own removal to stop), the cluster ID (0 until the first
// leader assigns it) and the incarnation of each member's data directory
// as the cluster first heard from it (see identity).
type membership struct {
	conf         *raftpb.ConfState
	peers        map[uint64]string
	removed      []uint64 // sorted
	cluster      uint64
	incarnations map[uint64]uint64
}

// clone returns a copy of m whose maps and slices are its own.
func (m membership) clone() membership {
	return membership{conf: proto.CloneOf(m.conf), peers: maps.Clone(m.peers), removed: slices.Clone(m.removed),
		cluster: m.cluster, incarnations: maps.Clone(m.incarnations)}
}

// encode: uvarint length | ConfState | uvarint count | (uvarint id | uvarint length | address)* |
// uvarint count | (uvarint id)* | uvarint cluster | uvarint count | (uvarint id | uvarint incarnation)*
// (records of the first format end after the removed IDs).
func (m membership) encode() []byte {
	cs, err := proto.Marshal(m.conf)
	if err != nil {
		panic(fmt.Sprintf("raftkv: marshal ConfState: %v", err)) // a ConfState always marshals
	}
	b := appendBytes(nil, cs)
	b = binary.AppendUvarint(b, uint64(len(m.peers)))
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		b = binary.AppendUvarint(b, id)
		b = appendBytes(b, []byte(m.peers[id]))
	}
	b = binary.AppendUvarint(b, uint64(len(m.removed)))
	for _, id := range m.removed {
		b = binary.AppendUvarint(b, id)
	}
	b = binary.AppendUvarint(b, m.cluster)
	b = binary.AppendUvarint(b, uint64(len(m.incarnations)))
	for _, id := range slices.Sorted(maps.Keys(m.incarnations)) {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, m.incarnations[id])
	}
	return b
}

func decodeMembership(b []byte) (membership, error) {
	d := &decoder{p: b}
	cs := d.bytes("conf state")
	n := d.uvarint("peer count")
	if d.err == nil && n > uint64(len(d.p)) {
		d.fail("peer count")
	}
	m := membership{conf: &raftpb.ConfState{}, peers: map[uint64]string{}, incarnations: map[uint64]uint64{}}
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.uvarint("peer id")
		m.peers[id] = string(d.bytes("peer address"))
	}
	n = d.uvarint("removed count")
	if d.err == nil && n > uint64(len(d.p)) {
		d.fail("removed count")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		m.removed = append(m.removed, d.uvarint("removed id"))
	}
	if d.err == nil && len(d.p) != 0 {
		m.cluster = d.uvarint("cluster")
		n = d.uvarint("incarnation count")
		if d.err == nil && n > uint64(len(d.p)) {
			d.fail("incarnation count")
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			id := d.uvarint("incarnation id")
			m.incarnations[id] = d.uvarint("incarnation")
		}
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail("membership length")
	}
	if d.err != nil {
		return membership{}, d.err
	}
	if err := proto.Unmarshal(cs, m.conf); err != nil {
		return membership{}, errorf("membership conf state: %v: %w", err, ErrCorruptLog)
	}
	return m, nil
}

// openLogStore opens (creating if needed) the log store in dir on fsys
// (nodeFS: the OS's, whose directories and files get the node's modes, see
// fsmode.go).
func openLogStore(fsys vfs.FS, dir string) (*logStore, error) {
	return openLogStoreSized(fsys, dir, 0)
}

// openLogStoreSized is openLogStore with a memtable of memTable bytes (0:
// storage's default; W9 compares sizes).
func openLogStoreSized(fsys vfs.FS, dir string, memTable uint64) (*logStore, error) {
	db, err := pebble.Open(dir, storage.PebbleOptions(&storage.Options{FS: fsys, MemTableSize: memTable}))
	if err != nil {
		return nil, errorf("open raft log store %s: %w", dir, err)
	}
	ls := &logStore{db: db, hs: &raftpb.HardState{}, initConf: &raftpb.ConfState{}, snapConf: &raftpb.ConfState{}}
	if err := ls.load(); err != nil {
		_ = db.Close()
		return nil, errorf("raft log store %s: %w", dir, err)
	}
	return ls, nil
}

func (ls *logStore) get(key []byte) ([]byte, bool, error) {
	v, c, err := ls.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := slices.Clone(v)
	return out, true, c.Close()
}

func (ls *logStore) load() error {
	if b, ok, err := ls.get(keyHardState); err != nil {
		return err
	} else if ok {
		if err := proto.Unmarshal(b, ls.hs); err != nil {
			return errorf("hard state: %v: %w", err, ErrCorruptLog)
		}
	}
	if b, ok, err := ls.get(keyTrunc); err != nil {
		return err
	} else if ok {
		if len(b) != 16 {
			return errorf("truncation record of %d bytes: %w", len(b), ErrCorruptLog)
		}
		ls.truncIndex, ls.truncTerm = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	}
	ls.last = ls.truncIndex
	it, err := ls.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(0), UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return err
	}
	if it.Last() {
		ls.last = binary.BigEndian.Uint64(it.Key()[1:])
	}
	if err := it.Close(); err != nil {
		return err
	}
	if ls.last < ls.truncIndex {
		return errorf("last entry %d below the compacted index %d: %w", ls.last, ls.truncIndex, ErrCorruptLog)
	}
	m, ok, err := ls.membershipAt(^uint64(0))
	if err != nil {
		return err
	}
	if ok {
		ls.snapConf = m.conf
	}
	return nil
}

// empty reports whether the store holds no raft state at all: a node that
// never ran.
func (ls *logStore) empty() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return raft.IsEmptyHardState(ls.hs) && ls.last == 0
}

// engineName returns the live engine directory's name ("" if never set).
func (ls *logStore) engineName() (string, error) {
	b, _, err := ls.get(keyEngine)
	return string(b), err
}

func (ls *logStore) removed() (bool, error) {
	_, ok, err := ls.get(keyRemoved)
	return ok, err
}

func (ls *logStore) setRemoved() error {
	return ls.db.Set(keyRemoved, []byte{1}, pebble.Sync)
}

// membershipAt returns the newest membership recorded at or below index.
func (ls *logStore) membershipAt(index uint64) (membership, bool, error) {
	it, err := ls.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(prefixMembership, 0),
		UpperBound: []byte{prefixMembership + 1},
	})
	if err != nil {
		return membership{}, false, err
	}
	defer it.Close()
	var ok bool
	if index == ^uint64(0) {
		ok = it.Last()
	} else {
		ok = it.SeekLT(indexKey(prefixMembership, index+1))
	}
	if !ok {
		return membership{}, false, it.Error()
	}
	m, err := decodeMembership(it.Value())
	if err != nil {
		return membership{}, false, errorf("membership at %d: %w", binary.BigEndian.Uint64(it.Key()[1:]), err)
	}
	return m, true, nil
}

// saveMembership records the membership that holds from index on, durably:
// a restart at or above index must see it before the engine's watermark
// can cover the entry that made it.
func (ls *logStore) saveMembership(index uint64, m membership) error {
	if err := ls.db.Set(indexKey(prefixMembership, index), m.encode(), pebble.Sync); err != nil {
		return err
	}
	ls.mu.Lock()
	ls.snapConf = m.conf
	ls.mu.Unlock()
	return nil
}

// setInitConf sets the ConfState InitialState returns.
func (ls *logStore) setInitConf(cs *raftpb.ConfState) {
	ls.mu.Lock()
	ls.initConf = cs
	ls.mu.Unlock()
}

// bounds returns the compacted index and the last index.
func (ls *logStore) bounds() (trunc, last uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.truncIndex, ls.last
}

func (ls *logStore) hardState() *raftpb.HardState {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return proto.CloneOf(ls.hs)
}

func marshalEntry(b *pebble.Batch, e *raftpb.Entry) error {
	data, err := proto.Marshal(e)
	if err != nil {
		return errorf("marshal entry %d: %w", e.GetIndex(), err)
	}
	return b.Set(entryKey(e.GetIndex()), data, nil)
}

// stage adds hs and ents to b; ents[0] replaces the entries from its index
// on (raft's rule for a conflicting suffix).
func (ls *logStore) stage(b *pebble.Batch, hs *raftpb.HardState, ents []*raftpb.Entry, last uint64) error {
	if hs != nil {
		data, err := proto.Marshal(hs)
		if err != nil {
			return err
		}
		if err := b.Set(keyHardState, data, nil); err != nil {
			return err
		}
	}
	if len(ents) == 0 {
		return nil
	}
	if first := ents[0].GetIndex(); first <= last {
		if err := b.DeleteRange(entryKey(first), entryKey(last+1), nil); err != nil {
			return err
		}
	}
	for _, e := range ents {
		if err := marshalEntry(b, e); err != nil {
			return err
		}
	}
	return nil
}

// save persists a Ready's HardState (nil: unchanged) and entries, with a
// sync if sync is set.
func (ls *logStore) save(hs *raftpb.HardState, ents []*raftpb.Entry, sync bool) error {
	if hs == nil && len(ents) == 0 {
		return nil
	}
	ls.mu.Lock()
	last := ls.last
	ls.mu.Unlock()
	b := ls.db.NewBatch()
	defer b.Close()
	if err := ls.stage(b, hs, ents, last); err != nil {
		return err
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if hs != nil {
		ls.hs = proto.CloneOf(hs)
	}
	ls.appendLocked(ents)
	return nil
}

// appendLocked records appended entries in memory. ls.mu held.
func (ls *logStore) appendLocked(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	ls.last = ents[len(ents)-1].GetIndex()
	if len(ls.cache) > 0 && first >= ls.cacheStart && first <= ls.cacheStart+uint64(len(ls.cache)) {
		ls.cache = append(ls.cache[:first-ls.cacheStart], ents...)
	} else {
		ls.cache, ls.cacheStart = slices.Clone(ents), first
	}
	if n := len(ls.cache); n > maxCachedEntries {
		drop := n - maxCachedEntries/2
		ls.cache = slices.Clone(ls.cache[drop:])
		ls.cacheStart += uint64(drop)
	}
}

// dropCacheLocked forgets cached entries at or below index. ls.mu held.
func (ls *logStore) dropCacheLocked(index uint64) {
	if len(ls.cache) == 0 || index < ls.cacheStart {
		return
	}
	if index >= ls.last {
		ls.cache, ls.cacheStart = nil, 0
		return
	}
	drop := index + 1 - ls.cacheStart
	ls.cache = slices.Clone(ls.cache[drop:])
	ls.cacheStart = index + 1
}

// installSnapshot makes a received snapshot the log's base in one synced
// batch with the switch to its engine directory: every entry goes, the
// base becomes the snapshot's index and term, its membership is recorded,
// the engine pointer names engine, and the Ready's HardState and entries
// (those after the snapshot) are written. A crash leaves either all of it
// or none.
func (ls *logStore) installSnapshot(meta *raftpb.SnapshotMetadata, m membership, engine string, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	idx, term := meta.GetIndex(), meta.GetTerm()
	b := ls.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(entryKey(0), []byte{prefixEntry + 1}, nil); err != nil {
		return err
	}
	tr := binary.LittleEndian.AppendUint64(nil, idx)
	tr = binary.LittleEndian.AppendUint64(tr, term)
	if err := b.Set(keyTrunc, tr, nil); err != nil {
		return err
	}
	if err := b.Set(indexKey(prefixMembership, idx), m.encode(), nil); err != nil {
		return err
	}
	if err := b.Set(keyEngine, []byte(engine), nil); err != nil {
		return err
	}
	if err := ls.stage(b, hs, ents, idx); err != nil {
		return err
	}
	// One critical section: see logStore.
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if ls.testHook != nil {
		ls.testHook("install: committed")
	}
	ls.truncIndex, ls.truncTerm, ls.last = idx, term, idx
	ls.cache, ls.cacheStart = nil, 0
	ls.snapConf = m.conf
	if hs != nil {
		ls.hs = proto.CloneOf(hs)
	}
	ls.appendLocked(ents)
	return nil
}

// compact removes the entries at or below index, which must be applied
// and covered by the engine's durable watermark, keeping index's term as
// the log's base. The write is synced, so that the HardState written before
// it (whose commit index is at least index) is durable too, and a restart
// never finds the log's base above its commit index. The deletion and the
// move of the base are one critical section (see logStore): a reader sees
// the log before or after, never entries gone below a base that says they
// are there.
func (ls *logStore) compact(index uint64) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	trunc, last := ls.truncIndex, ls.last
	if index <= trunc {
		return nil
	}
	if index > last {
		return errorf("compact to %d past the last entry %d", index, last)
	}
	term, err := ls.termLocked(index)
	if err != nil {
		return err
	}
	b := ls.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(entryKey(trunc+1), entryKey(index+1), nil); err != nil {
		return err
	}
	tr := binary.LittleEndian.AppendUint64(nil, index)
	tr = binary.LittleEndian.AppendUint64(tr, term)
	if err := b.Set(keyTrunc, tr, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if ls.testHook != nil {
		ls.testHook("compact: deleted")
	}
	ls.truncIndex, ls.truncTerm = index, term
	ls.dropCacheLocked(index)
	return nil
}

func (ls *logStore) close() error { return ls.db.Close() }

// InitialState implements raft.Storage.
func (ls *logStore) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return proto.CloneOf(ls.hs), proto.CloneOf(ls.initConf), nil
}

// Entries implements raft.Storage.
func (ls *logStore) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case lo <= ls.truncIndex:
		return nil, raft.ErrCompacted
	case hi > ls.last+1:
		return nil, errorf("entries [%d, %d) past the last index %d: %w", lo, hi, ls.last, raft.ErrUnavailable)
	case lo >= hi:
		return nil, nil
	}
	var out []*raftpb.Entry
	var size uint64
	add := func(e *raftpb.Entry) bool {
		s := uint64(proto.Size(e))
		if len(out) > 0 && size+s > maxSize {
			return false
		}
		out = append(out, e)
		size += s
		return true
	}
	if len(ls.cache) > 0 && lo >= ls.cacheStart {
		for i := lo; i < hi; i++ {
			if !add(ls.cache[i-ls.cacheStart]) {
				break
			}
		}
		return out, nil
	}
	it, err := ls.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(lo), UpperBound: entryKey(hi)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	want, full := lo, false
	for ok := it.First(); ok; ok = it.Next() {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, errorf("entry %d: %v: %w", want, err, ErrCorruptLog)
		}
		if e.GetIndex() != want {
			return nil, errorf("entry %d found where %d was expected: %w", e.GetIndex(), want, ErrCorruptLog)
		}
		if !add(e) {
			full = true
			break
		}
		want++
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if !full && want != hi {
		return nil, errorf("entry %d missing from the log: %w", want, ErrCorruptLog)
	}
	return out, nil
}

// Term implements raft.Storage.
func (ls *logStore) Term(i uint64) (uint64, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.termLocked(i)
}

// termLocked is Term with ls.mu held.
func (ls *logStore) termLocked(i uint64) (uint64, error) {
	switch {
	case i == ls.truncIndex:
		return ls.truncTerm, nil
	case i < ls.truncIndex:
		return 0, raft.ErrCompacted
	case i > ls.last:
		return 0, raft.ErrUnavailable
	}
	if len(ls.cache) > 0 && i >= ls.cacheStart {
		return ls.cache[i-ls.cacheStart].GetTerm(), nil
	}
	b, ok, err := ls.get(entryKey(i))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errorf("entry %d missing from the log: %w", i, ErrCorruptLog)
	}
	e := &raftpb.Entry{}
	if err := proto.Unmarshal(b, e); err != nil {
		return 0, errorf("entry %d: %v: %w", i, err, ErrCorruptLog)
	}
	return e.GetTerm(), nil
}

// LastIndex implements raft.Storage.
func (ls *logStore) LastIndex() (uint64, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.last, nil
}

// FirstIndex implements raft.Storage.
func (ls *logStore) FirstIndex() (uint64, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.truncIndex + 1, nil
}

// Snapshot implements raft.Storage. It describes the log's base only: the
// host replaces the metadata of every snapshot message it sends with its
// applied index at that moment, and streams the engine as of that index
// (see Node.sendMessages), so no snapshot is ever materialized here.
func (ls *logStore) Snapshot() (*raftpb.Snapshot, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index:     proto.Uint64(ls.truncIndex),
		Term:      proto.Uint64(ls.truncTerm),
		ConfState: proto.CloneOf(ls.snapConf),
	}}, nil
}
