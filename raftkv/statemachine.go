package raftkv

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"sync/atomic"

	"github.com/kvbuf/kvbuf"
)

// stateMachine is what a node applies committed entries to and reads from:
// the kvbuf engine (engineSM). The Ready loop is its only writer: entries
// arrive in index order, each exactly once per node lifetime, though a
// restart may redeliver entries at or below durable() (see Node's restart
// rule). Reads run concurrently with applies.
type stateMachine interface {
	// durable returns the index up to which applied entries survive a
	// crash. A restart resumes raft at min(durable(), HardState.Commit).
	durable() uint64
	// durableNotify returns a channel that is closed once durable()
	// advances past its value when durableNotify was called (the log may
	// then be compacted up to it).
	durableNotify() <-chan struct{}
	// apply applies the commands of entry index, in order, as one op:
	// results[i] is command i's own failure, the same on every node (an
	// unknown keyspace, a key or value over the limits), which its client
	// gets back. The error is a failure of this node (I/O), after which
	// it must stop rather than skip the entry.
	apply(ctx context.Context, index uint64, cmds []*command, results []error) error
	// skip records entry index, which changes no state (an empty entry, a
	// configuration change, an entry that does not decode).
	skip(ctx context.Context, index uint64) error
	// commit ends a run of applies: the node acknowledges them to their
	// clients once it returns.
	commit(ctx context.Context) error

	// get, getBit and scan read the applied state (Node.Get, GetBit,
	// ScanAfter); names lists the keyspaces and bitslices; snapshot pins
	// the applied state (snapshots sent to followers, backups, digests);
	// metrics are the engine's.
	get(keyspace string, key []byte) ([]byte, error)
	getBit(bitslice string, i uint64) (bool, error)
	scan(keyspace string, prefix, after []byte, limit int) ([]KeyValue, bool, error)
	names() (keyspaces, bitslices []string)
	snapshot() (*kvbuf.Snapshot, error)
	metrics() kvbuf.Metrics
	close() error
}

// engineSM is the kvbuf state machine. Entry i is op i of the engine: its
// commands are single writes of op i, ended with EndOp, and an entry that
// writes nothing is an empty batch of its op. The engine's flusher makes
// applied entries durable, and its watermark is the durable applied index.
type engineSM struct {
	db    *kvbuf.DB
	empty *kvbuf.Batch // always empty: records an op that writes nothing
	// handles maps names to the engine's handles; copied on write (the
	// Ready loop creates keyspaces, readers look them up without a lock).
	handles atomic.Pointer[handles]
}

type handles struct {
	kvs  map[string]*kvbuf.KV
	bits map[string]*kvbuf.Bits
}

// openEngineSM opens the engine in dir and a handle for each of its
// keyspaces and bitslices.
func openEngineSM(dir string, opts *kvbuf.Options) (*engineSM, error) {
	db, err := kvbuf.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	e := &engineSM{db: db, empty: db.NewBatch()}
	h := &handles{kvs: map[string]*kvbuf.KV{}, bits: map[string]*kvbuf.Bits{}}
	for _, name := range db.Keyspaces() {
		if h.kvs[name], err = db.KV(name); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	for _, name := range db.Bitslices() {
		if h.bits[name], err = db.Bits(name); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	e.handles.Store(h)
	return e, nil
}

func (e *engineSM) durable() uint64 { return e.db.Watermark() }

func (e *engineSM) durableNotify() <-chan struct{} {
	_, ch := e.db.WatermarkNotify()
	return ch
}

func (e *engineSM) close() error { return e.db.Close() }

func (e *engineSM) metrics() kvbuf.Metrics { return e.db.Metrics() }

func (e *engineSM) names() (keyspaces, bitslices []string) {
	return e.db.Keyspaces(), e.db.Bitslices()
}

func (e *engineSM) snapshot() (*kvbuf.Snapshot, error) { return e.db.NewSnapshot() }

func (e *engineSM) kv(name string) (*kvbuf.KV, error) {
	if k := e.handles.Load().kvs[name]; k != nil {
		return k, nil
	}
	return nil, errorf("keyspace %q: %w", name, ErrUnknownKeyspace)
}

func (e *engineSM) bits(name string) (*kvbuf.Bits, error) {
	if b := e.handles.Load().bits[name]; b != nil {
		return b, nil
	}
	return nil, errorf("bitslice %q: %w", name, ErrUnknownBitslice)
}

// skip applies an empty batch as op index: the op is recorded and complete
// with no write (EndOp alone would end an op never begun), and a
// redelivered one is a no-op like any write at or below the watermark.
func (e *engineSM) skip(ctx context.Context, index uint64) error {
	return e.db.Apply(ctx, e.empty, index)
}

// commit implements stateMachine: the engine's writes are applied (and
// visible) when they return; its flusher makes them durable.
func (e *engineSM) commit(context.Context) error { return nil }

// apply implements stateMachine. The engine checks each command (its
// limits, the handle) as it writes it: a refused command writes nothing and
// the others go on. The op is begun by its first write and ended by
// EndOp; an entry none of whose commands writes is an empty batch of its
// op.
func (e *engineSM) apply(ctx context.Context, index uint64, cmds []*command, results []error) error {
	wrote := false
	for i, c := range cmds {
		err := e.write(ctx, index, c)
		switch {
		case err == nil:
			wrote = wrote || c.kind != cmdCreateKeyspace && c.kind != cmdCreateBitslice
		case isCommandError(err):
			results[i] = err
		default:
			return errorf("apply entry %d (%v): %w", index, c.kind, err)
		}
	}
	switch {
	case !wrote:
		return e.skip(ctx, index)
	case index <= e.db.Watermark():
		// Redelivered: the engine skipped the writes, and the op is
		// complete (a watermark never covers an open op).
		return nil
	}
	return e.db.EndOp(ctx, index)
}

// write applies one command as a write of op index.
func (e *engineSM) write(ctx context.Context, index uint64, c *command) error {
	switch c.kind {
	case cmdPut, cmdDelete, cmdDeleteRange:
		k, err := e.kv(c.name)
		if err != nil {
			return err
		}
		switch c.kind {
		case cmdPut:
			return k.Put(ctx, c.key, c.value, index)
		case cmdDelete:
			return k.Delete(ctx, c.key, index)
		}
		var lo, hi []byte
		if c.hasLo {
			lo = c.key
		}
		if c.hasHi {
			hi = c.value
		}
		return k.DeleteRange(ctx, lo, hi, index)
	case cmdSetBit:
		b, err := e.bits(c.name)
		if err != nil {
			return err
		}
		return b.Set(ctx, c.bit, c.set, index)
	case cmdCreateKeyspace, cmdCreateBitslice:
		return e.create(c)
	}
	return errorf("command kind %v in entry %d: %w", c.kind, index, ErrCorruptLog)
}

// create makes the keyspace or bitslice c names (nothing if it exists).
func (e *engineSM) create(c *command) error {
	h := e.handles.Load()
	if _, ok := h.kvs[c.name]; ok && c.kind == cmdCreateKeyspace {
		return nil
	}
	if _, ok := h.bits[c.name]; ok && c.kind == cmdCreateBitslice {
		return nil
	}
	next := &handles{kvs: maps.Clone(h.kvs), bits: maps.Clone(h.bits)}
	if c.kind == cmdCreateKeyspace {
		k, err := e.db.KV(c.name)
		if err != nil {
			return err
		}
		next.kvs[c.name] = k
	} else {
		b, err := e.db.Bits(c.name)
		if err != nil {
			return err
		}
		next.bits[c.name] = b
	}
	e.handles.Store(next)
	return nil
}

func (e *engineSM) get(keyspace string, key []byte) ([]byte, error) {
	k, err := e.kv(keyspace)
	if err != nil {
		return nil, err
	}
	return k.Get(key)
}

func (e *engineSM) getBit(bitslice string, i uint64) (bool, error) {
	b, err := e.bits(bitslice)
	if err != nil {
		return false, err
	}
	return b.Get(i)
}

// scan reads at most limit pairs (limit <= 0: all) of keyspace whose keys
// start with prefix and sort above after (nil: from the first), from one
// snapshot of the engine; more reports that limit left pairs out.
func (e *engineSM) scan(keyspace string, prefix, after []byte, limit int) (kvs []KeyValue, more bool, err error) {
	if _, err := e.kv(keyspace); err != nil {
		return nil, false, err
	}
	s, err := e.db.NewSnapshot()
	if err != nil {
		return nil, false, err
	}
	defer s.Close()
	r, err := s.KV(keyspace)
	if err != nil {
		return nil, false, err
	}
	it, err := r.NewIter(&kvbuf.IterOptions{Prefix: prefix})
	if err != nil {
		return nil, false, err
	}
	var ok bool
	if from := append(bytes.Clone(after), 0); after != nil && bytes.Compare(from, prefix) > 0 {
		ok = it.SeekGE(from) // the first key above after
	} else {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		if limit > 0 && len(kvs) == limit {
			more = true
			break
		}
		kvs = append(kvs, KeyValue{Key: bytes.Clone(it.Key()), Value: bytes.Clone(it.Value())})
	}
	return kvs, more, it.Close()
}

// isCommandError reports whether err is a command's own failure rather than
// the node's.
func isCommandError(err error) bool {
	for _, target := range []error{
		ErrUnknownKeyspace, ErrUnknownBitslice, kvbuf.ErrBadName, kvbuf.ErrEmptyKey,
		kvbuf.ErrKeyTooLarge, kvbuf.ErrValueTooLarge, kvbuf.ErrBadRange, kvbuf.ErrOutOfRange,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
