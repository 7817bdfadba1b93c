package flush

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// memTarget is a test Target with an in-memory durable backend that tests
// read directly. Optionally each Apply appends to a file and fdatasyncs it.
type memTarget struct {
	name string

	mu        sync.Mutex
	pending   map[string]uint64
	frozen    map[string]uint64 // nil when nothing is frozen
	durable   map[string]uint64 // the "disk"
	durableWM uint64
	wmHistory []uint64
	applies   int
	releases  int
	freezes   int
	// hook runs at the start of Apply (n = 1-based Apply count) without
	// t.mu; it may block, return an error, panic or call runtime.Goexit.
	hook func(n int, wm uint64) error
	// freezeHook runs at the start of Freeze, under the write barrier.
	freezeHook func()
	file       *os.File // if set, Apply writes and fdatasyncs
	syncs      atomic.Int64

	bytes atomic.Int64
}

func newMemTarget(name string) *memTarget {
	return &memTarget{name: name, pending: map[string]uint64{}, durable: map[string]uint64{}}
}

func (t *memTarget) Name() string { return t.name }

func (t *memTarget) recount() {
	t.bytes.Store(int64(16 * (len(t.pending) + len(t.frozen))))
}

// Put records a pending write; callers hold a write Op.
func (t *memTarget) Put(key string, op uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[key] = op
	t.recount()
}

func (t *memTarget) Freeze() uint64 {
	if t.freezeHook != nil {
		t.freezeHook()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.freezes++
	if t.frozen == nil {
		t.frozen = t.pending
	} else {
		for k, v := range t.pending {
			t.frozen[k] = v
		}
	}
	t.pending = map[string]uint64{}
	var m uint64
	for _, v := range t.frozen {
		m = max(m, v)
	}
	t.recount()
	return m
}

// Apply reads the frozen set without holding t.mu during the hook and the
// sync (Freeze, Apply and Release are serialized by the caller; Put only
// touches pending), so writers are not stalled behind a sync, as with a
// real overlay.
func (t *memTarget) Apply(ctx context.Context, wm uint64) error {
	t.mu.Lock()
	t.applies++
	n, frozen := t.applies, t.frozen
	t.mu.Unlock()
	if t.hook != nil {
		if err := t.hook(n, wm); err != nil {
			return err
		}
	}
	if t.file != nil {
		buf := make([]byte, 0, 16*len(frozen)+8)
		for k := range frozen {
			buf = append(buf, k...)
			buf = append(buf, '\n')
		}
		if _, err := t.file.Write(buf); err != nil {
			return err
		}
		if err := syscall.Fdatasync(int(t.file.Fd())); err != nil {
			return err
		}
		t.syncs.Add(1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range frozen {
		t.durable[k] = v
	}
	t.durableWM = wm
	t.wmHistory = append(t.wmHistory, wm)
	return nil
}

func (t *memTarget) Release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releases++
	t.frozen = nil
	t.recount()
}

func (t *memTarget) PendingBytes() int64 { return t.bytes.Load() }

func (t *memTarget) isDurable(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.durable[key]
	return ok
}

func (t *memTarget) snapshot() (durable map[string]uint64, wm uint64, applies int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := make(map[string]uint64, len(t.durable))
	for k, v := range t.durable {
		d[k] = v
	}
	return d, t.durableWM, t.applies
}

// write does one covered write through f.
func write(ctx context.Context, f *Flusher, key string, op uint64, ts ...*memTarget) error {
	w, err := f.BeginWrite(ctx)
	if err != nil {
		return err
	}
	defer w.End()
	for _, t := range ts {
		t.Put(key, op)
	}
	return nil
}

func (t *memTarget) snapshotKeys() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) + len(t.frozen) + len(t.durable)
}
