package buffer

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/storage"
)

// kvVal is a pending KV change: a value or a tombstone. It is two words (a
// byte pointer and a length, -1 for a tombstone) rather than a slice and a
// flag, so an entry with its key and a small value fits one cache line.
type kvVal struct {
	p *byte // first value byte; nil for an empty value or a tombstone
	n int   // value length; tombstoneLen for a tombstone
}

const tombstoneLen = -1

// tombstone is the kvVal of a Delete.
var tombstone = kvVal{n: tombstoneLen}

// valOf views b as a kvVal without copying.
func valOf(b []byte) kvVal { return kvVal{p: unsafe.SliceData(b), n: len(b)} }

// del reports whether v is a tombstone.
func (v kvVal) del() bool { return v.n < 0 }

// bytes returns the value's bytes (nil for a tombstone); callers must not
// modify them.
func (v kvVal) bytes() []byte {
	if v.n <= 0 {
		return nil
	}
	return unsafe.Slice(v.p, v.n)
}

func kvValBytes(v kvVal) int64 { return int64(max(v.n, 0)) }

// store is what a KV needs of a *storage.Store. It exists so tests can wrap
// the real store and fail Apply on demand; production code always passes a
// *storage.Store.
type store interface {
	Get(key []byte) ([]byte, error)
	GetAppend(dst, key []byte) ([]byte, error)
	NewIter(lower, upper []byte) (*storage.Iter, error)
	NewBatch() *storage.Batch
	Apply(b *storage.Batch) error
}

type (
	kvTable = Table[string, kvVal]
	kvEntry = entry[string, kvVal]
)

// coallocMax is the largest value stored in one allocation with its entry.
const coallocMax = 64

// KV is a pending-changes overlay over a storage.Store: Put and Delete land
// in an in-memory table and are visible to Get and NewIter at once; the
// flusher moves them to the store with Freeze, Apply and Release (the
// flush.Target protocol). All methods are safe for concurrent use.
type KV struct {
	st         store
	prefix     []byte
	maxKey     int
	maxVal     int
	maxPending int64
	nshards    int

	// active takes writes; frozen (nil when none) is the set being flushed
	// or kept after a failed Apply. Readers look at active, then frozen,
	// then the store: changes only ever move in that direction, so a reader
	// never misses a change that completed before it started.
	active atomic.Pointer[kvTable]
	frozen atomic.Pointer[kvTable]

	// flushMu serialises Freeze, Apply and Release.
	flushMu     sync.Mutex
	frozenMaxOp uint64 // under flushMu
	applied     bool   // under flushMu: frozen set applied since the last Freeze
	lastLen     int64  // under flushMu: capacity hint for the next table
	pool        *tablePool[string, kvVal]

	keyBufs sync.Pool // *[]byte scratch for prefixed store keys

	// testHookFreeze, if set (tests only), runs in Freeze once the next
	// active table is chosen, before the swap.
	testHookFreeze func(next *kvTable)
}

// NewKV returns an empty overlay over s. s may be shared by several KVs with
// distinct Options.KeyPrefix values. A nil s behaves as a closed store:
// reads that reach it and Apply return storage.ErrClosed.
func NewKV(s *storage.Store, opts *Options) *KV {
	var st store
	if s != nil {
		st = s
	}
	return newKV(st, opts)
}

func newKV(st store, opts *Options) *KV {
	kv := &KV{
		st:         st,
		maxKey:     opts.maxKeySize(),
		maxVal:     opts.maxValueSize(),
		maxPending: opts.MaxPending(),
		nshards:    opts.shards(),
		pool:       newTablePool[string, kvVal](opts.poolBytes()),
	}
	if opts != nil && len(opts.KeyPrefix) > 0 {
		kv.prefix = append([]byte(nil), opts.KeyPrefix...)
	}
	kv.active.Store(kv.newTable())
	return kv
}

func (kv *KV) newTable() *kvTable {
	t := newTable[string, kvVal](kv.nshards, true)
	t.valBytes = kvValBytes
	t.mk = newKVEntry
	return t
}

// inlineEntry is an entry followed by room for its key and value bytes in
// the same allocation. D is a byte array whose size makes the whole object a
// Go size class (48, 64, 80, 96, 128, 192, 256 bytes): with an 8-byte key and
// a 16-byte value (W2) the entry is one 64-byte, cache-line-aligned object.
type inlineEntry[D any] struct {
	e    kvEntry
	data D
}

// newInline allocates an inline entry and returns it with its data bytes.
func newInline[D any]() (*kvEntry, []byte) {
	p := new(inlineEntry[D])
	return &p.e, unsafe.Slice((*byte)(unsafe.Pointer(&p.data)), unsafe.Sizeof(p.data))
}

// newKVEntry is the KV table's entry allocator: it copies a pending change
// out of the caller's buffers. The key and a value of up to coallocMax bytes
// go into the entry's own allocation, so a lookup that compares the key finds
// the value in the same object (one cache miss after the slot instead of
// three: entry, key, value). Every entry carries its own key copy, overwrites
// included, so the hit path never follows a pointer into another object.
//
// The skip list node keeps the key of the entry that first inserted it, and
// with it that entry's allocation: only small values share it, so a large
// stale value is never kept alive by the key.
func newKVEntry(k string, v kvVal) *kvEntry {
	vin := 0 // value bytes stored inline
	if v.n > 0 && v.n <= coallocMax {
		vin = v.n
	}
	var (
		e   *kvEntry
		buf []byte
	)
	switch need := len(k) + vin; {
	case need <= 8:
		e, buf = newInline[[8]byte]()
	case need <= 24:
		e, buf = newInline[[24]byte]()
	case need <= 40:
		e, buf = newInline[[40]byte]()
	case need <= 56:
		e, buf = newInline[[56]byte]()
	case need <= 88:
		e, buf = newInline[[88]byte]()
	case need <= 152:
		e, buf = newInline[[152]byte]()
	case need <= 216:
		e, buf = newInline[[216]byte]()
	default:
		e, buf = new(kvEntry), make([]byte, need)
	}
	copy(buf, k)
	e.key = unsafe.String(unsafe.SliceData(buf), len(k))
	switch {
	case v.del():
		e.val = tombstone
	case v.n == 0:
		e.val = kvVal{}
	case vin > 0:
		copy(buf[len(k):], v.bytes())
		e.val = kvVal{p: &buf[len(k)], n: v.n}
	default:
		e.val = valOf(bytes.Clone(v.bytes()))
	}
	return e
}

// keyString views key as a string without copying; the table clones it if it
// keeps it.
func keyString(key []byte) string { return unsafe.String(unsafe.SliceData(key), len(key)) }

// quoteKey renders a key for an error message, truncated.
func quoteKey(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q...(%d bytes)", key[:64], len(key))
	}
	return fmt.Sprintf("%q", key)
}

func (kv *KV) checkKey(op string, key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("buffer: %s: %w", op, ErrEmptyKey)
	}
	if len(key) > kv.maxKey {
		return fmt.Errorf("buffer: %s %s: %d bytes (max %d): %w", op, quoteKey(key), len(key), kv.maxKey, ErrKeyTooLarge)
	}
	return nil
}

// Put records key=value with the host's operation number op. Key and value
// are copied: the caller may reuse both buffers once Put returns. The change
// is visible to every Get and new iterator once Put returns.
//
// Errors: ErrEmptyKey, ErrKeyTooLarge, ErrValueTooLarge (nothing recorded).
func (kv *KV) Put(key, value []byte, op uint64) error {
	if err := kv.checkKey("put", key); err != nil {
		return err
	}
	if len(value) > kv.maxVal {
		return fmt.Errorf("buffer: put %s: value %d bytes (max %d): %w", quoteKey(key), len(value), kv.maxVal, ErrValueTooLarge)
	}
	kv.set(key, valOf(value), op) // the table copies (newKVEntry)
	return nil
}

// Delete records a tombstone for key with operation number op: Get reports
// storage.ErrNotFound and iterators skip the key, whatever the store holds,
// until a later Put; the flush deletes the stored key.
//
// Errors: ErrEmptyKey, ErrKeyTooLarge.
func (kv *KV) Delete(key []byte, op uint64) error {
	if err := kv.checkKey("delete", key); err != nil {
		return err
	}
	kv.set(key, tombstone, op)
	return nil
}

// set writes to the active table. Set fails only on a table sealed by
// Freeze, which has already published its successor, so the retry lands in
// the new active table: a write never lands in a table being applied.
func (kv *KV) set(key []byte, v kvVal, op uint64) {
	k := keyString(key)
	for !kv.active.Load().Set(k, v, op) {
	}
}

// Get returns the value of key: the newest pending change (active, then
// frozen set) or else the stored value. It returns a copy the caller owns.
//
// Errors: storage.ErrNotFound (a tombstone, or absent everywhere),
// ErrEmptyKey, ErrKeyTooLarge, and the store's errors.
func (kv *KV) Get(key []byte) ([]byte, error) {
	if err := kv.checkKey("get", key); err != nil {
		return nil, err
	}
	if e := kv.lookup(key); e != nil {
		if e.val.del() {
			return nil, storage.ErrNotFound
		}
		out := make([]byte, e.val.n) // non-nil even when empty, like the store's
		copy(out, e.val.bytes())
		return out, nil
	}
	return kv.storeGet(nil, key, false)
}

// GetAppend is Get appending the value to dst instead of allocating a copy:
// with enough capacity in dst it does not allocate (a pending value or a
// stored one). It returns the extended slice, or dst unchanged on error.
// Like Get, it never returns memory the overlay keeps.
func (kv *KV) GetAppend(dst, key []byte) ([]byte, error) {
	if err := kv.checkKey("get", key); err != nil {
		return dst, err
	}
	if e := kv.lookup(key); e != nil {
		if e.val.del() {
			return dst, storage.ErrNotFound
		}
		return append(dst, e.val.bytes()...), nil
	}
	return kv.storeGet(dst, key, true)
}

// lookup returns the newest pending entry for key (a value or a tombstone):
// active table, then frozen set, hashing the key once. nil if neither holds
// key. Lock-free: atomic loads only.
func (kv *KV) lookup(key []byte) *kvEntry {
	k := keyString(key)
	a := kv.active.Load()
	f := kv.frozen.Load()
	af := a.shards.Load()
	if af == nil && f == nil {
		return nil
	}
	h := a.hash(k)
	if af != nil {
		if e := a.lookupHash(af, k, h); e != nil {
			return e
		}
	}
	if f != nil {
		if ff := f.shards.Load(); ff != nil {
			return f.lookupHash(ff, k, h)
		}
	}
	return nil
}

// storeGet reads key from the store: a copy, or appended to dst.
func (kv *KV) storeGet(dst, key []byte, appendMode bool) ([]byte, error) {
	if kv.st == nil {
		return dst, storage.ErrClosed
	}
	if len(kv.prefix) == 0 {
		if appendMode {
			return kv.st.GetAppend(dst, key)
		}
		return kv.st.Get(key)
	}
	bp, _ := kv.keyBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	pk := append(append((*bp)[:0], kv.prefix...), key...)
	var (
		v   []byte
		err error
	)
	if appendMode {
		v, err = kv.st.GetAppend(dst, pk)
	} else {
		v, err = kv.st.Get(pk)
	}
	*bp = pk
	kv.keyBufs.Put(bp)
	return v, err
}

// MaxOp returns the highest op number among pending changes (active and
// frozen sets); 0 when nothing is pending.
func (kv *KV) MaxOp() uint64 {
	m := kv.active.Load().MaxOp()
	if f := kv.frozen.Load(); f != nil {
		m = max(m, f.MaxOp())
	}
	return m
}

// PendingBytes returns the memory held by pending changes, active and
// frozen: key and value bytes plus a per-entry table overhead.
func (kv *KV) PendingBytes() int64 {
	n := kv.active.Load().Bytes()
	if f := kv.frozen.Load(); f != nil {
		n += f.Bytes()
	}
	return n
}

// MaxPendingBytes returns Options.MaxPendingBytes (or its default): the
// bound the flusher enforces on PendingBytes.
func (kv *KV) MaxPendingBytes() int64 { return kv.maxPending }

// Len returns the number of pending changes (active plus frozen; a key in
// both counts twice).
func (kv *KV) Len() int {
	n := kv.active.Load().Len()
	if f := kv.frozen.Load(); f != nil {
		n += f.Len()
	}
	return n
}

// Freeze moves the active table to the frozen set and publishes a fresh
// (pooled when possible) active table; it returns the highest op number in
// the frozen set. Writers are excluded while the tables swap (the old table
// is sealed: a write that loses the race retries on the new one), readers
// are not. If a frozen set is left from a failed Apply, it is merged under
// the newer changes. With nothing new pending it keeps the frozen set as it
// is.
func (kv *KV) Freeze() uint64 {
	kv.flushMu.Lock()
	defer kv.flushMu.Unlock()
	old := kv.active.Load()
	prev := kv.frozen.Load()
	if old.Len() == 0 {
		// Nothing to freeze. A write racing with this check started before
		// Freeze returned, so it may belong to either generation.
		if prev == nil {
			kv.frozenMaxOp = 0
		}
		return kv.frozenMaxOp
	}
	// A pooled table stays sealed until it is published as the active
	// table: a writer that loaded its pointer generations ago (when it was
	// last active) may still be about to call Set on it. Unsealed before
	// publication, that stale write would land in a table no reader
	// consults yet, so the writer's own next Get would read the older value
	// from the current active table, and once published the stale value
	// would shadow newer writes made to that table meanwhile.
	next := kv.pool.get(kv.lastLen)
	pooled := next != nil
	if !pooled {
		next = kv.newTable()
	}
	if kv.testHookFreeze != nil {
		kv.testHookFreeze(next)
	}
	old.Seal(func() {
		if prev != nil {
			// prev is not recycled: a reader may still be probing it, and
			// its contents are not in the store.
			old.mergeUnderSealed(prev)
		}
		kv.frozen.Store(old) // before active: readers go active -> frozen
		kv.active.Store(next)
		if pooled {
			// Only now: a write it accepts is one to the active table.
			// Writers that load next before this spin in set until then.
			next.unseal()
		}
	})
	kv.applied = false
	kv.frozenMaxOp = old.MaxOp()
	return kv.frozenMaxOp
}

// Apply writes the frozen set, in key order, into one storage batch that
// also carries the watermark wm (when wm > 0), committed with one synced
// Apply. On error the frozen set stays readable and the next Freeze merges
// newer changes over it; nothing is lost. ctx is checked before and during
// the batch build; the commit itself is not interruptible.
func (kv *KV) Apply(ctx context.Context, wm uint64) error {
	kv.flushMu.Lock()
	defer kv.flushMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	f := kv.frozen.Load()
	if (f == nil || f.Len() == 0) && wm == 0 {
		kv.applied = true
		return nil
	}
	if kv.st == nil {
		return storage.ErrClosed
	}
	b := kv.st.NewBatch()
	if f != nil {
		if err := kv.fillBatch(ctx, b, f); err != nil {
			return err
		}
	}
	if wm > 0 {
		b.SetWatermark(wm)
	}
	if err := kv.st.Apply(b); err != nil {
		return fmt.Errorf("buffer: apply %d pending changes: %w", b.Len(), err)
	}
	kv.applied = true
	return nil
}

// fillBatch adds f's changes to b in key order, merging the shards' skip
// lists (already sorted: no sort pass).
func (kv *KV) fillBatch(ctx context.Context, b *storage.Batch, f *kvTable) error {
	var m mergeCursor[string, kvVal]
	m.addTable(f, 0)
	key := append([]byte(nil), kv.prefix...)
	n := 0
	for m.seek("", true); m.valid(); m.advance() {
		e := m.top().ent.Load()
		if e == nil {
			continue
		}
		if n++; n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		key = append(key[:len(kv.prefix)], e.key...)
		if e.val.del() {
			b.Delete(key)
		} else {
			b.Put(key, e.val.bytes())
		}
	}
	return nil
}

// Release drops the frozen set after a successful Apply, recycling its table.
// Without a successful Apply since the last Freeze it does nothing: a
// frozen set is only dropped once the store holds it.
func (kv *KV) Release() {
	kv.flushMu.Lock()
	defer kv.flushMu.Unlock()
	f := kv.frozen.Load()
	if f == nil || !kv.applied {
		return
	}
	kv.lastLen = f.capacityBytes()
	kv.frozen.Store(nil)
	kv.frozenMaxOp = 0
	kv.pool.put(f) // clears f if kept; a pinned or oversize table goes to the GC
}
