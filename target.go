package kvbuf

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/buffer"
)

// engineTarget is the engine's single flush.Target: every bitslice overlay,
// then the KV overlay. The KV overlay goes last because its synced pebble
// batch carries the engine's watermark: by the time the receipt is written,
// every bitslice has msynced the data it covers (contract 4).
//
// Bitslices can be added while the engine runs, so Freeze snapshots the list
// and Apply and Release work on that snapshot: a bitslice added after the
// freeze has nothing frozen and joins the next flush.
type engineTarget struct {
	kv *buffer.KV

	mu     sync.Mutex
	bits   atomic.Pointer[[]*bitsEntry] // copy-on-write: PendingBytes reads it on every write
	frozen []*bitsEntry                 // guarded by mu; the snapshot taken by Freeze
}

type bitsEntry struct {
	name string
	ov   *buffer.Bits
}

func (t *engineTarget) add(name string, ov *buffer.Bits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cur []*bitsEntry
	if p := t.bits.Load(); p != nil {
		cur = *p
	}
	next := append(append(make([]*bitsEntry, 0, len(cur)+1), cur...), &bitsEntry{name, ov})
	t.bits.Store(&next)
}

func (t *engineTarget) list() []*bitsEntry {
	if p := t.bits.Load(); p != nil {
		return *p
	}
	return nil
}

// Name implements flush.Namer.
func (t *engineTarget) Name() string { return "engine" }

// Freeze implements flush.Target.
func (t *engineTarget) Freeze() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.frozen = t.list()
	var maxOp uint64
	for _, b := range t.frozen {
		maxOp = max(maxOp, b.ov.Freeze())
	}
	return max(maxOp, t.kv.Freeze())
}

// Apply implements flush.Target: bitslices first, the receipt last.
func (t *engineTarget) Apply(ctx context.Context, wm uint64) error {
	t.mu.Lock()
	frozen := t.frozen
	t.mu.Unlock()
	for _, b := range frozen {
		if err := b.ov.Apply(ctx, wm); err != nil {
			return fmt.Errorf("bitslice %q: %w", b.name, err)
		}
	}
	if err := t.kv.Apply(ctx, wm); err != nil {
		return fmt.Errorf("keyspaces: %w", err)
	}
	return nil
}

// Release implements flush.Target.
func (t *engineTarget) Release() {
	t.mu.Lock()
	frozen := t.frozen
	t.frozen = nil
	t.mu.Unlock()
	for _, b := range frozen {
		b.ov.Release()
	}
	t.kv.Release()
}

// PendingBytes implements flush.Target.
func (t *engineTarget) PendingBytes() int64 {
	n := t.kv.PendingBytes()
	for _, b := range t.list() {
		n += b.ov.PendingBytes()
	}
	return n
}
