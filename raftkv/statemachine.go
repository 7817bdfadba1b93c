package raftkv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/kvbuf/kvbuf"
)

// stateMachine is what a node applies committed entries to. The node's
// Ready loop is its only writer: entries arrive in index order, each
// exactly once per node lifetime, though a restart may redeliver entries
// at or below durable() (see Node's restart rule).
type stateMachine interface {
	// durable returns the index up to which applied entries survive a
	// crash. A restart resumes raft at min(durable(), HardState.Commit).
	durable() uint64
	// apply applies command c of entry index. result is the command's own
	// failure, the same on every node (an unknown keyspace, a value over
	// the limit), which the client gets back; fatal is a failure of this
	// node (I/O), after which it must stop rather than skip the entry.
	apply(ctx context.Context, index uint64, c *command) (result, fatal error)
	// skip advances the applied index past entry index, which changes no
	// state (an empty entry, a configuration change, a command that does
	// not decode).
	skip(ctx context.Context, index uint64) error
	close() error
}

// engineSM is the kvbuf state machine: each entry is one batch whose op is
// the entry's index; an entry that changes nothing is an empty batch of its
// op.
type engineSM struct {
	db    *kvbuf.DB
	batch *kvbuf.Batch
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
	e := &engineSM{db: db, batch: db.NewBatch()}
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

func (e *engineSM) close() error { return e.db.Close() }

func (e *engineSM) kv(name string) (*kvbuf.KV, error) {
	if k := e.handles.Load().kvs[name]; k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("keyspace %q: %w", name, ErrUnknownKeyspace)
}

func (e *engineSM) bits(name string) (*kvbuf.Bits, error) {
	if b := e.handles.Load().bits[name]; b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("bitslice %q: %w", name, ErrUnknownBitslice)
}

// skip applies an empty batch as op index: the op is recorded and complete
// with no write (EndOp alone would end an op never begun), and a
// redelivered one is a no-op like any write at or below the watermark.
func (e *engineSM) skip(ctx context.Context, index uint64) error {
	e.batch.Reset()
	return e.db.Apply(ctx, e.batch, index)
}

// apply implements stateMachine.
func (e *engineSM) apply(ctx context.Context, index uint64, c *command) (result, fatal error) {
	switch c.kind {
	case cmdCreateKeyspace, cmdCreateBitslice:
		if err := e.create(c); err != nil && !isCommandError(err) {
			return nil, fmt.Errorf("raftkv: apply entry %d (%v %q): %w", index, c.kind, c.name, err)
		} else if err != nil {
			result = err
		}
		return result, e.skip(ctx, index)
	}
	b := e.batch
	b.Reset()
	switch c.kind {
	case cmdPut, cmdDelete, cmdDeleteRange:
		k, err := e.kv(c.name)
		if err != nil {
			return err, e.skip(ctx, index)
		}
		switch c.kind {
		case cmdPut:
			b.Put(k, c.key, c.value)
		case cmdDelete:
			b.Delete(k, c.key)
		default:
			var lo, hi []byte
			if c.hasLo {
				lo = c.key
			}
			if c.hasHi {
				hi = c.value
			}
			b.DeleteRange(k, lo, hi)
		}
	case cmdSetBit:
		s, err := e.bits(c.name)
		if err != nil {
			return err, e.skip(ctx, index)
		}
		b.Set(s, c.bit, c.set)
	default:
		return fmt.Errorf("%w: command kind %v", ErrCorrupt, c.kind), e.skip(ctx, index)
	}
	if err := b.Err(); err != nil {
		// Refused before anything was applied (a key or value over this
		// engine's limits): the same on every node with the same options.
		return err, e.skip(ctx, index)
	}
	if err := e.db.Apply(ctx, b, index); err != nil {
		return nil, fmt.Errorf("raftkv: apply entry %d (%v): %w", index, c.kind, err)
	}
	return nil, nil
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
