package buffer

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvbuf/kvbuf/storage"
)

// W2: key-value lookups over pebble (workloads.md). The 1M-key stores and
// the 1M pending changes are built once per process (sync.Once) on real
// directories (not vfs.NewMem), then shared by every row.
//
// Extra rows beside the canonical impls: kvbuf-getappend is KV.GetAppend
// into a reused buffer (no copy allocation); pebble-get-store-options is raw
// db.Get on pebble opened the way storage.Open opens kvbuf's store
// (FormatNewest, 8 MiB cache), so get-miss/kvbuf over it is the overlay's
// own cost, and pebble-get over it is the storage format's.
//
//	go test ./buffer -run '^$' -bench 'BenchmarkW2' -count 5 -timeout 60m

const (
	w2Stored   = 1 << 20
	w2Pending  = 1_000_000
	w2Space    = 4 << 20
	w2Lookups  = 1_000_000
	w2ScanKeys = 10_000
)

type w2Fixture struct {
	dir   string
	store *storage.Store // kvbuf's backend
	kv    *KV
	db    *pebble.DB // raw pebble with the same data, for the baselines
	// dbSame is raw pebble configured as storage.Open configures kvbuf's
	// store (FormatNewest, 8 MiB cache): db.Get minus the store's key tag
	// and close guard, to split get-miss into store format and overlay.
	dbSame *pebble.DB
	batch  *pebble.Batch
	rw     *rwMapPebble

	hit, tomb, miss, mixed [][]byte
	err                    error
}

type rwVal struct {
	v   []byte
	del bool
}

// rwMapPebble is the rwmutex+map+pebble baseline: a map of pending changes
// in front of db.Get.
type rwMapPebble struct {
	mu sync.RWMutex
	m  map[string]rwVal
	db *pebble.DB
}

func (r *rwMapPebble) get(k []byte) ([]byte, bool) {
	r.mu.RLock()
	v, ok := r.m[string(k)]
	r.mu.RUnlock()
	if ok {
		if v.del {
			return nil, false
		}
		return append([]byte(nil), v.v...), true
	}
	return pebbleGet(r.db, k)
}

func pebbleGet(r pebble.Reader, k []byte) ([]byte, bool) {
	v, c, err := r.Get(k)
	if err != nil {
		return nil, false
	}
	out := append([]byte(nil), v...)
	c.Close()
	return out, true
}

var (
	w2Once sync.Once
	w2     w2Fixture
)

func w2Key(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

func w2Setup(b *testing.B) *w2Fixture {
	w2Once.Do(func() {
		f := &w2
		f.dir, f.err = os.MkdirTemp("", "kvbuf-w2-")
		if f.err != nil {
			return
		}
		if f.store, f.err = storage.Open(f.dir+"/kvbuf", nil); f.err != nil {
			return
		}
		if f.db, f.err = pebble.Open(f.dir+"/pebble", &pebble.Options{Logger: quietPebble{}}); f.err != nil {
			return
		}
		if f.dbSame, f.err = pebble.Open(f.dir+"/pebble-same", &pebble.Options{
			Logger: quietPebble{}, CacheSize: 8 << 20, FormatMajorVersion: pebble.FormatNewest,
		}); f.err != nil {
			return
		}
		val := make([]byte, 16)
		sb := f.store.NewBatch()
		pb := f.db.NewBatch()
		qb := f.dbSame.NewBatch()
		for i := range uint64(w2Stored) {
			binary.BigEndian.PutUint64(val, i)
			sb.Put(w2Key(i*4), val)
			pb.Set(w2Key(i*4), val, nil)
			qb.Set(w2Key(i*4), val, nil)
		}
		if f.err = f.store.Apply(sb); f.err != nil {
			return
		}
		if f.err = pb.Commit(pebble.Sync); f.err != nil {
			return
		}
		if f.err = qb.Commit(pebble.Sync); f.err != nil {
			return
		}
		if f.err = f.dbSame.Flush(); f.err != nil {
			return
		}
		if f.err = f.store.Flush(); f.err != nil {
			return
		}
		if f.err = f.db.Flush(); f.err != nil {
			return
		}
		f.kv = NewKV(f.store, nil)
		f.batch = f.db.NewIndexedBatch()
		f.rw = &rwMapPebble{m: map[string]rwVal{}, db: f.db}
		rng := rand.New(rand.NewPCG(2, 2))
		final := map[uint64]bool{} // key -> deleted
		for op := range uint64(w2Pending) {
			k := rng.Uint64N(w2Space)
			key := w2Key(k)
			if rng.IntN(10) == 0 {
				f.kv.Delete(key, op+1)
				f.batch.Delete(key, nil)
				f.rw.m[string(key)] = rwVal{del: true}
				final[k] = true
			} else {
				binary.BigEndian.PutUint64(val, op)
				f.kv.Put(key, val, op+1)
				f.batch.Set(key, val, nil)
				f.rw.m[string(key)] = rwVal{v: append([]byte(nil), val...)}
				final[k] = false
			}
		}
		for len(f.hit) < w2Lookups || len(f.tomb) < w2Lookups || len(f.miss) < w2Lookups {
			k := rng.Uint64N(w2Space)
			del, pending := final[k]
			switch {
			case pending && !del && len(f.hit) < w2Lookups:
				f.hit = append(f.hit, w2Key(k))
			case pending && del && len(f.tomb) < w2Lookups:
				f.tomb = append(f.tomb, w2Key(k))
			case !pending && len(f.miss) < w2Lookups:
				f.miss = append(f.miss, w2Key(k))
			}
		}
		for range w2Lookups {
			f.mixed = append(f.mixed, w2Key(rng.Uint64N(w2Space)))
		}
	})
	if w2.err != nil {
		b.Fatal(w2.err)
	}
	return &w2
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + format)
}

func BenchmarkW2(b *testing.B) {
	f := w2Setup(b)
	rows := []struct {
		name string
		keys [][]byte
	}{
		{"get-pending-hit", f.hit},
		{"get-pending-tombstone", f.tomb},
		{"get-miss", f.miss},
		{"get-mixed", f.mixed},
	}
	buf := make([]byte, 0, 64) // kvbuf-getappend's reused value buffer
	impls := []struct {
		name string
		get  func(k []byte) bool
	}{
		{"kvbuf", func(k []byte) bool { _, err := f.kv.Get(k); return err == nil }},
		{"kvbuf-getappend", func(k []byte) bool {
			var err error
			buf, err = f.kv.GetAppend(buf[:0], k)
			return err == nil
		}},
		{"pebble-get", func(k []byte) bool { _, ok := pebbleGet(f.db, k); return ok }},
		{"pebble-get-store-options", func(k []byte) bool { _, ok := pebbleGet(f.dbSame, k); return ok }},
		{"pebble-indexed-batch", func(k []byte) bool { _, ok := pebbleGet(f.batch, k); return ok }},
		{"rwmutex+map+pebble", func(k []byte) bool { _, ok := f.rw.get(k); return ok }},
	}
	for _, row := range rows {
		for _, impl := range impls {
			b.Run(row.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				i, found := 0, 0
				for b.Loop() {
					if impl.get(row.keys[i]) {
						found++
					}
					if i++; i == len(row.keys) {
						i = 0
					}
				}
				_ = found
			})
		}
	}
	scanStarts := f.mixed[:1000]
	b.Run("scan-10k/kvbuf", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			it, err := f.kv.NewIter(scanStarts[i%len(scanStarts)], nil)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for ok := it.First(); ok && n < w2ScanKeys; ok = it.Next() {
				n++
			}
			it.Close()
			i++
		}
	})
	b.Run("scan-10k/pebble-indexed-batch", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			it, err := f.batch.NewIter(&pebble.IterOptions{LowerBound: scanStarts[i%len(scanStarts)]})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for ok := it.First(); ok && n < w2ScanKeys; ok = it.Next() {
				_ = it.Value()
				n++
			}
			it.Close()
			i++
		}
	})
}

// TestW2Fixture checks the benchmark's premises on a small scale: kvbuf and
// the indexed batch agree on every lookup class and on a merged scan.
func TestW2Agreement(t *testing.T) {
	s := openStore(t)
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sb := s.NewBatch()
	for i := range uint64(1000) {
		sb.Put(w2Key(i*4), w2Key(i))
		db.Set(w2Key(i*4), w2Key(i), nil)
	}
	if err := s.Apply(sb); err != nil {
		t.Fatal(err)
	}
	kv := NewKV(s, &Options{Shards: 4})
	batch := db.NewIndexedBatch()
	rng := rand.New(rand.NewPCG(5, 5))
	for op := range uint64(3000) {
		k := w2Key(rng.Uint64N(4000))
		if rng.IntN(10) == 0 {
			kv.Delete(k, op+1)
			batch.Delete(k, nil)
		} else {
			kv.Put(k, w2Key(op), op+1)
			batch.Set(k, w2Key(op), nil)
		}
		if op == 1500 {
			kv.Freeze()
		}
	}
	for k := range uint64(4000) {
		got, err := kv.Get(w2Key(k))
		want, ok := pebbleGet(batch, w2Key(k))
		if (err == nil) != ok || string(got) != string(want) {
			t.Fatalf("key %d: kvbuf %x, %v; indexed batch %x, %v", k, got, err, want, ok)
		}
	}
	it, _ := kv.NewIter(w2Key(100), nil)
	bit, _ := batch.NewIter(&pebble.IterOptions{LowerBound: w2Key(100)})
	ok1, ok2 := it.First(), bit.First()
	n := 0
	for ; ok1 && ok2; ok1, ok2 = it.Next(), bit.Next() {
		if string(it.Key()) != string(bit.Key()) || string(it.Value()) != string(bit.Value()) {
			t.Fatalf("scan step %d: %x vs %x", n, it.Key(), bit.Key())
		}
		n++
	}
	if ok1 != ok2 || n < 1000 {
		t.Fatalf("scan ended unevenly after %d keys (%v %v)", n, ok1, ok2)
	}
	it.Close()
	bit.Close()
}

// w2Close closes and removes the W2 fixture if a benchmark built it.
func w2Close() {
	if w2.batch != nil {
		w2.batch.Close()
	}
	if w2.db != nil {
		w2.db.Close()
	}
	if w2.dbSame != nil {
		w2.dbSame.Close()
	}
	if w2.store != nil {
		w2.store.Close()
	}
	if w2.dir != "" {
		os.RemoveAll(w2.dir)
	}
}
