package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/kvbuf/kvbuf/storage"
)

func openStore(t testing.TB) *storage.Store {
	t.Helper()
	s, err := storage.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// faultyStore wraps the real store and fails Apply while fail is set.
type faultyStore struct {
	*storage.Store
	fail    atomic.Bool
	applies atomic.Int64
}

var errInjected = errors.New("injected apply failure")

func (f *faultyStore) Apply(b *storage.Batch) error {
	f.applies.Add(1)
	if f.fail.Load() {
		b.Reset()
		return errInjected
	}
	return f.Store.Apply(b)
}

func wantValue(t *testing.T, kv *KV, key, want string) {
	t.Helper()
	got, err := kv.Get([]byte(key))
	if err != nil || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, got, err, want)
	}
}

func wantMissing(t *testing.T, kv *KV, key string) {
	t.Helper()
	got, err := kv.Get([]byte(key))
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, got, err)
	}
}

func flushKV(t testing.TB, kv *KV, wm uint64) {
	t.Helper()
	kv.Freeze()
	if err := kv.Apply(context.Background(), wm); err != nil {
		t.Fatal(err)
	}
	kv.Release()
}

func TestKVPutGetDelete(t *testing.T) {
	s := openStore(t)
	kv := NewKV(s, nil)
	wantMissing(t, kv, "a")
	if err := kv.Put([]byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	wantValue(t, kv, "a", "1")
	flushKV(t, kv, 1)
	if kv.Len() != 0 || kv.PendingBytes() != 0 {
		t.Fatalf("after flush: Len %d PendingBytes %d", kv.Len(), kv.PendingBytes())
	}
	if v, err := s.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("store Get = %q, %v", v, err)
	}
	wantValue(t, kv, "a", "1") // from the store
	// A tombstone hides the stored value, before and after a flush.
	kv.Delete([]byte("a"), 2)
	wantMissing(t, kv, "a")
	kv.Freeze()
	wantMissing(t, kv, "a") // frozen tombstone
	if err := kv.Apply(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	kv.Release()
	wantMissing(t, kv, "a")
	if _, err := s.Get([]byte("a")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("store still has the deleted key: %v", err)
	}
	if wm, _ := s.Watermark(); wm != 2 {
		t.Fatalf("watermark %d, want 2", wm)
	}
	// Empty values are values, not tombstones.
	kv.Put([]byte("e"), nil, 3)
	if v, err := kv.Get([]byte("e")); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("empty value: %q (nil=%v), %v", v, v == nil, err)
	}
}

func TestKVCopies(t *testing.T) {
	kv := NewKV(openStore(t), nil)
	k, v := []byte("key"), []byte("val")
	kv.Put(k, v, 1)
	copy(k, "XXX")
	copy(v, "YYY")
	wantValue(t, kv, "key", "val")
	got, _ := kv.Get([]byte("key"))
	copy(got, "ZZZ")
	wantValue(t, kv, "key", "val")
	// Overwrite with a reused key buffer keeps the original key.
	k2 := []byte("key")
	kv.Put(k2, []byte("v2"), 2)
	copy(k2, "QQQ")
	wantValue(t, kv, "key", "v2")
}

func TestKVBadInput(t *testing.T) {
	kv := NewKV(openStore(t), &Options{MaxKeySize: 8, MaxValueSize: 4})
	cases := []struct {
		name string
		err  error
		fn   func() error
	}{
		{"put empty key", ErrEmptyKey, func() error { return kv.Put(nil, []byte("v"), 1) }},
		{"put empty non-nil key", ErrEmptyKey, func() error { return kv.Put([]byte{}, []byte("v"), 1) }},
		{"put long key", ErrKeyTooLarge, func() error { return kv.Put([]byte("123456789"), nil, 1) }},
		{"put long value", ErrValueTooLarge, func() error { return kv.Put([]byte("k"), []byte("12345"), 1) }},
		{"delete empty key", ErrEmptyKey, func() error { return kv.Delete(nil, 1) }},
		{"delete long key", ErrKeyTooLarge, func() error { return kv.Delete(bytes.Repeat([]byte("k"), 9), 1) }},
		{"get empty key", ErrEmptyKey, func() error { _, err := kv.Get(nil); return err }},
		{"get long key", ErrKeyTooLarge, func() error { _, err := kv.Get(bytes.Repeat([]byte("k"), 100)); return err }},
	}
	for _, c := range cases {
		if err := c.fn(); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	if kv.Len() != 0 || kv.MaxOp() != 0 {
		t.Fatalf("rejected writes left state: Len %d MaxOp %d", kv.Len(), kv.MaxOp())
	}
	// Limits are inclusive.
	if err := kv.Put([]byte("12345678"), []byte("1234"), 1); err != nil {
		t.Fatal(err)
	}
	// Defaults: 4096-byte keys, 1 MiB values.
	d := NewKV(openStore(t), nil)
	if err := d.Put(bytes.Repeat([]byte("k"), 4096), nil, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Put(bytes.Repeat([]byte("k"), 4097), nil, 1); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatal(err)
	}
	if err := d.Put([]byte("k"), make([]byte, 1<<20+1), 1); !errors.Is(err, ErrValueTooLarge) {
		t.Fatal(err)
	}
}

func TestKVNilStore(t *testing.T) {
	kv := NewKV(nil, nil)
	kv.Put([]byte("a"), []byte("1"), 1)
	wantValue(t, kv, "a", "1")
	if _, err := kv.Get([]byte("b")); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("miss on nil store: %v", err)
	}
	kv.Freeze()
	if err := kv.Apply(context.Background(), 1); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Apply on nil store: %v", err)
	}
	kv.Release() // no successful Apply: keeps the frozen set
	wantValue(t, kv, "a", "1")
	if _, err := kv.NewIter(nil, nil); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("NewIter on nil store: %v", err)
	}
}

func TestKVClosedStore(t *testing.T) {
	s, err := storage.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := NewKV(s, nil)
	kv.Put([]byte("a"), []byte("1"), 1)
	s.Close()
	wantValue(t, kv, "a", "1")
	if _, err := kv.Get([]byte("b")); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Get after store Close: %v", err)
	}
	kv.Freeze()
	if err := kv.Apply(context.Background(), 1); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Apply after store Close: %v", err)
	}
}

func TestKVMaxOpAndPending(t *testing.T) {
	kv := NewKV(openStore(t), &Options{MaxPendingBytes: 12345})
	if kv.MaxPendingBytes() != 12345 {
		t.Fatal("MaxPendingBytes")
	}
	if NewKV(nil, nil).MaxPendingBytes() != defaultMaxPendingBytes {
		t.Fatal("default MaxPendingBytes")
	}
	kv.Put([]byte("a"), make([]byte, 100), 5)
	kv.Delete([]byte("b"), 9)
	kv.Put([]byte("c"), nil, 7)
	if kv.MaxOp() != 9 {
		t.Fatalf("MaxOp %d", kv.MaxOp())
	}
	p := kv.PendingBytes()
	if p < 100+3 {
		t.Fatalf("PendingBytes %d", p)
	}
	if got := kv.Freeze(); got != 9 {
		t.Fatalf("Freeze = %d, want 9", got)
	}
	if kv.PendingBytes() != p {
		t.Fatalf("PendingBytes after Freeze %d, want %d (frozen counts)", kv.PendingBytes(), p)
	}
	kv.Put([]byte("d"), nil, 11)
	if kv.MaxOp() != 11 {
		t.Fatalf("MaxOp %d", kv.MaxOp())
	}
	kv.Apply(context.Background(), 9)
	kv.Release()
	if kv.MaxOp() != 11 || kv.Freeze() != 11 {
		t.Fatal("MaxOp after release")
	}
	if kv.Freeze() != 11 {
		t.Fatal("re-Freeze with nothing new must keep the frozen op")
	}
}

// TestKVFailedApply injects Apply failures around writes and checks reads
// stay right and, after a successful retry, the store holds exactly the model.
func TestKVFailedApply(t *testing.T) {
	fs := &faultyStore{Store: openStore(t)}
	kv := newKV(fs, nil)
	model := map[string]string{}
	put := func(k, v string, op uint64) {
		kv.Put([]byte(k), []byte(v), op)
		model[k] = v
	}
	del := func(k string, op uint64) {
		kv.Delete([]byte(k), op)
		delete(model, k)
	}
	check := func() {
		t.Helper()
		for i := range 20 {
			k := fmt.Sprint("k", i)
			if v, ok := model[k]; ok {
				wantValue(t, kv, k, v)
			} else {
				wantMissing(t, kv, k)
			}
		}
	}
	for i := range 10 {
		put(fmt.Sprint("k", i), "a", uint64(i+1))
	}
	flushKV(t, kv, 10)
	put("k1", "b", 11)
	del("k2", 12)
	put("k15", "b", 13)
	if got := kv.Freeze(); got != 13 {
		t.Fatalf("Freeze = %d", got)
	}
	fs.fail.Store(true)
	if err := kv.Apply(context.Background(), 13); !errors.Is(err, errInjected) {
		t.Fatalf("Apply = %v", err)
	}
	kv.Release() // must not drop the unapplied frozen set
	check()
	// Newer writes over the failed frozen set, then another failure.
	put("k1", "c", 14)
	put("k2", "c", 15)
	del("k15", 16)
	put("k16", "c", 17)
	check()
	if got := kv.Freeze(); got != 17 {
		t.Fatalf("second Freeze = %d", got)
	}
	check()
	if err := kv.Apply(context.Background(), 17); !errors.Is(err, errInjected) {
		t.Fatalf("Apply = %v", err)
	}
	put("k3", "d", 18)
	check()
	fs.fail.Store(false)
	if got := kv.Freeze(); got != 18 {
		t.Fatalf("third Freeze = %d", got)
	}
	if err := kv.Apply(context.Background(), 18); err != nil {
		t.Fatal(err)
	}
	kv.Release()
	check()
	if kv.Len() != 0 {
		t.Fatalf("pending after successful flush: %d", kv.Len())
	}
	// The store alone now equals the model.
	stored := map[string]string{}
	it, err := fs.Store.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		stored[string(it.Key())] = string(it.Value())
	}
	it.Close()
	if fmt.Sprint(stored) != fmt.Sprint(model) {
		t.Fatalf("store %v\nmodel %v", stored, model)
	}
	if wm, _ := fs.Store.Watermark(); wm != 18 {
		t.Fatalf("watermark %d", wm)
	}
}

func TestKVApplyCanceled(t *testing.T) {
	fs := &faultyStore{Store: openStore(t)}
	kv := newKV(fs, nil)
	kv.Put([]byte("a"), []byte("1"), 1)
	kv.Freeze()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := kv.Apply(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply = %v", err)
	}
	if fs.applies.Load() != 0 {
		t.Fatal("canceled Apply reached the store")
	}
	kv.Release()
	wantValue(t, kv, "a", "1")
	flushKV(t, kv, 1)
	wantValue(t, kv, "a", "1")
}

func TestKVPrefix(t *testing.T) {
	s := openStore(t)
	a := NewKV(s, &Options{KeyPrefix: []byte("a/")})
	b := NewKV(s, &Options{KeyPrefix: []byte("b/")})
	a.Put([]byte("k"), []byte("A"), 1)
	b.Put([]byte("k"), []byte("B"), 2)
	flushKV(t, a, 1)
	flushKV(t, b, 2)
	wantValue(t, a, "k", "A")
	wantValue(t, b, "k", "B")
	if v, err := s.Get([]byte("a/k")); err != nil || string(v) != "A" {
		t.Fatalf("store a/k = %q, %v", v, err)
	}
	b.Put([]byte("j"), []byte("B2"), 3)
	b.Delete([]byte("k"), 4)
	wantMissing(t, a, "j")
	wantValue(t, a, "k", "A")
	if got := scanAll(t, b, nil, nil); got != "j=B2" {
		t.Fatalf("b scan = %s", got)
	}
	if got := scanAll(t, a, nil, nil); got != "k=A" {
		t.Fatalf("a scan = %s", got)
	}
	// A prefix of 0xff bytes has no successor: the scan is unbounded above.
	c := NewKV(s, &Options{KeyPrefix: []byte{0xff, 0xff}})
	c.Put([]byte{0xff}, []byte("C"), 5)
	flushKV(t, c, 5)
	if got := scanAll(t, c, nil, nil); got != "\xff=C" {
		t.Fatalf("c scan = %q", got)
	}
}

func scanAll(t *testing.T, kv *KV, lower, upper []byte) string {
	t.Helper()
	it, err := kv.NewIter(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var parts []string
	for ok := it.First(); ok; ok = it.Next() {
		parts = append(parts, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(parts, ",")
}

func TestKVIterMerge(t *testing.T) {
	s := openStore(t)
	kv := NewKV(s, &Options{Shards: 4})
	for _, k := range []string{"a", "c", "e", "g", "i"} {
		kv.Put([]byte(k), []byte("s"), 1)
	}
	flushKV(t, kv, 1)
	kv.Put([]byte("b"), []byte("f"), 2) // frozen
	kv.Put([]byte("c"), []byte("f"), 2) // frozen over stored
	kv.Delete([]byte("e"), 2)           // frozen tombstone over stored
	kv.Put([]byte("g"), []byte("f"), 2) // frozen, then deleted in active
	kv.Delete([]byte("x"), 2)           // tombstone over nothing
	kv.Freeze()
	kv.Put([]byte("c"), []byte("a"), 3) // active over frozen over stored
	kv.Delete([]byte("g"), 3)
	kv.Put([]byte("e"), []byte("a"), 3) // active over frozen tombstone
	kv.Put([]byte("h"), []byte("a"), 3)
	want := "a=s,b=f,c=a,e=a,h=a,i=s"
	if got := scanAll(t, kv, nil, nil); got != want {
		t.Fatalf("scan = %s\nwant   %s", got, want)
	}
	for _, c := range []struct{ lo, hi, want string }{
		{"b", "h", "b=f,c=a,e=a"},
		{"bb", "e", "c=a"},
		{"c", "c", ""},
		{"z", "", ""},
		{"", "b", "a=s"},
		{"h", "b", ""}, // inverted bounds: empty, no error
	} {
		var lo, hi []byte
		if c.lo != "" {
			lo = []byte(c.lo)
		}
		if c.hi != "" {
			hi = []byte(c.hi)
		}
		if got := scanAll(t, kv, lo, hi); got != c.want {
			t.Errorf("scan [%q,%q) = %s, want %s", c.lo, c.hi, got, c.want)
		}
	}
	it, _ := kv.NewIter([]byte("b"), []byte("i"))
	defer it.Close()
	if !it.SeekGE([]byte("d")) || string(it.Key()) != "e" || string(it.Value()) != "a" {
		t.Fatalf("SeekGE(d) at %q", it.Key())
	}
	if !it.SeekGE([]byte("a")) || string(it.Key()) != "b" {
		t.Fatalf("SeekGE below lower at %q", it.Key())
	}
	if it.SeekGE([]byte("i")) || it.Valid() || it.Key() != nil {
		t.Fatal("SeekGE at upper found a key")
	}
	// Same answer after the frozen set is applied.
	kv.Apply(context.Background(), 2)
	kv.Release()
	if got := scanAll(t, kv, nil, nil); got != want {
		t.Fatalf("after apply scan = %s", got)
	}
	flushKV(t, kv, 3)
	if got := scanAll(t, kv, nil, nil); got != want {
		t.Fatalf("after full flush scan = %s", got)
	}
}

// TestKVIterDuringFlush: an iterator opened before a flush keeps returning
// the state it started from while the flush applies and releases the tables.
func TestKVIterDuringFlush(t *testing.T) {
	kv := NewKV(openStore(t), nil)
	for i := range 100 {
		kv.Put(fmt.Appendf(nil, "k%03d", i), []byte("v"), uint64(i+1))
	}
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("empty")
	}
	flushKV(t, kv, 100)
	for i := range 100 {
		kv.Put(fmt.Appendf(nil, "x%03d", i), []byte("v"), 200)
	}
	flushKV(t, kv, 200) // would reuse the first table if the iterator did not pin it
	n := 1
	for it.Next() {
		if !strings.HasPrefix(string(it.Key()), "k") && !strings.HasPrefix(string(it.Key()), "x") {
			t.Fatalf("key %q", it.Key())
		}
		if strings.HasPrefix(string(it.Key()), "k") {
			n++
		}
	}
	if n != 100 {
		t.Fatalf("iterator saw %d of 100 keys across a flush", n)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if it.Next() || it.First() || it.SeekGE([]byte("a")) || it.Valid() {
		t.Fatal("closed iterator moved")
	}
	if err := it.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestKVIterRandom(t *testing.T) {
	kv := NewKV(openStore(t), &Options{Shards: 2})
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(3, 4))
	op := uint64(0)
	for round := range 6 {
		for range 300 {
			op++
			k := fmt.Sprintf("%03d", rng.IntN(400))
			if rng.IntN(4) == 0 {
				kv.Delete([]byte(k), op)
				delete(model, k)
			} else {
				v := fmt.Sprint(op)
				kv.Put([]byte(k), []byte(v), op)
				model[k] = v
			}
		}
		switch round % 3 {
		case 0:
			flushKV(t, kv, op)
		case 1:
			kv.Freeze()
		}
		keys := make([]string, 0, len(model))
		for k := range model {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		lo, hi := fmt.Sprintf("%03d", rng.IntN(400)), fmt.Sprintf("%03d", rng.IntN(400))
		var want []string
		for _, k := range keys {
			if k >= lo && k < hi {
				want = append(want, k+"="+model[k])
			}
		}
		if got := scanAll(t, kv, []byte(lo), []byte(hi)); got != strings.Join(want, ",") {
			t.Fatalf("round %d scan [%s,%s):\n got %s\nwant %s", round, lo, hi, got, strings.Join(want, ","))
		}
	}
}

// TestKVReleaseDropsReferences: after Release the recycled table holds no
// reference to any pending value.
func TestKVReleaseDropsReferences(t *testing.T) {
	kv := NewKV(openStore(t), nil)
	var ws []weak.Pointer[byte]
	for i := range 50 {
		kv.Put(fmt.Appendf(nil, "k%d", i), []byte("value"), 1)
	}
	kv.active.Load().Range(func(_ string, v kvVal) bool {
		ws = append(ws, weak.Make(v.p))
		return true
	})
	flushKV(t, kv, 1)
	if poolEnabled && kv.pool.hits+int64(len(kv.pool.classes[poolClass(kv.lastLen)])) == 0 {
		t.Fatal("released table was not pooled")
	}
	runtime.GC()
	runtime.GC()
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("value %d still reachable after Release", i)
		}
	}
}

// TestKVConcurrent runs writers, readers and a flusher (failing every third
// Apply) against a model: every read returns a value some write produced for
// that key, never older than the reader's own last write.
func TestKVConcurrent(t *testing.T) {
	fs := &faultyStore{Store: openStore(t)}
	kv := newKV(fs, &Options{Shards: 4})
	const writers, keysPer, steps = 3, 50, 1500
	var opSeq atomic.Uint64
	var wg sync.WaitGroup
	done := make(chan struct{})
	flushErr := make(chan error, 1)
	go func() {
		defer close(flushErr)
		n := 0
		for {
			select {
			case <-done:
				fs.fail.Store(false)
				wm := kv.Freeze()
				if err := kv.Apply(context.Background(), wm); err != nil {
					flushErr <- err
					return
				}
				kv.Release()
				return
			default:
			}
			n++
			fs.fail.Store(n%3 == 0)
			wm := kv.Freeze()
			if err := kv.Apply(context.Background(), wm); err == nil {
				kv.Release()
			}
			runtime.Gosched()
		}
	}()
	final := make([]map[string]string, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			mine := map[string]string{}
			for s := range steps {
				k := fmt.Sprintf("w%d-%02d", w, rng.IntN(keysPer))
				op := opSeq.Add(1)
				if rng.IntN(6) == 0 {
					kv.Delete([]byte(k), op)
					delete(mine, k)
				} else {
					v := fmt.Sprintf("%s@%d", k, s)
					kv.Put([]byte(k), []byte(v), op)
					mine[k] = v
				}
				// Read-your-writes on a random own key.
				rk := fmt.Sprintf("w%d-%02d", w, rng.IntN(keysPer))
				got, err := kv.Get([]byte(rk))
				want, ok := mine[rk]
				switch {
				case ok && (err != nil || string(got) != want):
					t.Errorf("Get(%s) = %q, %v; want %q", rk, got, err, want)
					return
				case !ok && !errors.Is(err, storage.ErrNotFound):
					t.Errorf("Get(%s) = %q, %v; want not found", rk, got, err)
					return
				}
				// Another writer's key: any value must belong to that key.
				ok2 := fmt.Sprintf("w%d-%02d", (w+1)%writers, rng.IntN(keysPer))
				if got, err := kv.Get([]byte(ok2)); err == nil && !strings.HasPrefix(string(got), ok2+"@") {
					t.Errorf("Get(%s) = %q: not a value written to it", ok2, got)
					return
				}
				if s%200 == 0 {
					prefix := fmt.Sprintf("w%d-", w)
					it, err := kv.NewIter([]byte(prefix), []byte(fmt.Sprintf("w%d.", w)))
					if err != nil {
						t.Error(err)
						return
					}
					seen := map[string]string{}
					for ok := it.First(); ok; ok = it.Next() {
						seen[string(it.Key())] = string(it.Value())
					}
					it.Close()
					if fmt.Sprint(seen) != fmt.Sprint(mine) {
						t.Errorf("writer %d scan differs from own writes:\n got %v\nwant %v", w, seen, mine)
						return
					}
				}
			}
			final[w] = mine
		}()
	}
	wg.Wait()
	close(done)
	if err := <-flushErr; err != nil {
		t.Fatal(err)
	}
	if kv.Len() != 0 {
		t.Fatalf("pending after final flush: %d", kv.Len())
	}
	stored := map[string]string{}
	it, _ := fs.Store.NewIter(nil, nil)
	for ok := it.First(); ok; ok = it.Next() {
		stored[string(it.Key())] = string(it.Value())
	}
	it.Close()
	want := map[string]string{}
	for _, m := range final {
		for k, v := range m {
			want[k] = v
		}
	}
	if fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Fatalf("store after final flush differs from model (%d vs %d keys)", len(stored), len(want))
	}
}

// TestKVStaleWriterPooledTable is the race behind TestKVConcurrent's
// read-your-writes failures: a writer loads the active table, is descheduled
// for a whole Freeze/Apply/Release cycle (the table is cleared and pooled),
// and calls Set just as the next Freeze takes that table from the pool as
// the new active one but has not published it yet. The write must not land
// there: the writer's own Get would read the older value from the still
// current active table, and the stale write would later shadow newer ones.
func TestKVStaleWriterPooledTable(t *testing.T) {
	if !poolEnabled {
		t.Skip("pooling disabled (kvbuf_nopool)")
	}
	kv := newKV(openStore(t), nil)
	k := []byte("k")
	stale := kv.active.Load() // the writer's load in set, before it stalls
	if err := kv.Put([]byte("other"), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	kv.Freeze()
	if err := kv.Apply(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	kv.Release() // stale is cleared and pooled
	if err := kv.Put(k, []byte("old"), 2); err != nil {
		t.Fatal(err)
	}
	var hooked bool
	kv.testHookFreeze = func(next *kvTable) {
		kv.testHookFreeze = nil
		if next != stale {
			t.Fatalf("Freeze did not reuse the pooled table")
		}
		hooked = true
		// The stalled writer resumes: Delete(k) as set would do it.
		for tb := stale; !tb.Set("k", tombstone, 3); tb = kv.active.Load() {
		}
		if v, err := kv.Get(k); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get(k) after own Delete = %q, %v; want not found", v, err)
		}
		// A later write by the same writer must win over the delete.
		if err := kv.Put(k, []byte("new"), 4); err != nil {
			t.Fatal(err)
		}
	}
	kv.Freeze()
	if !hooked {
		t.Fatal("test hook did not run")
	}
	if v, err := kv.Get(k); err != nil || string(v) != "new" {
		t.Errorf("Get(k) after Freeze = %q, %v; want \"new\"", v, err)
	}
	if err := kv.Apply(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	kv.Release()
	if v, err := kv.Get(k); err != nil || string(v) != "new" {
		t.Errorf("Get(k) after flush = %q, %v; want \"new\"", v, err)
	}
}
