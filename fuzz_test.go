package kvbuf

// Fuzz targets of the root package. Their seed corpora live in
// testdata/fuzz/<FuzzName>/ and run in every normal `go test`; fuzz with
//
//	go test -run '^$' -fuzz FuzzOpenDir -fuzztime 60s .
//	go test -run '^$' -fuzz FuzzOps -fuzztime 60s .
//
// (The bitslice header has its own target, bitslice.FuzzParseHeader.)

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/storage"
)

// FuzzOpenDir opens engine directories with a fuzzed manifest, bitslice
// file and keyspace catalog (the store is on a MemFS, so an execution costs
// milliseconds). Open and Bits must either fail with a typed error and
// change nothing, or give an engine that works: reads, a write, a flush and
// a reopen.
func FuzzOpenDir(f *testing.F) {
	valid := validBitsImage(f)
	f.Add([]byte(manifestText), valid, []byte("k 1\n"))
	f.Add([]byte(manifestText), valid[:100], []byte("k 1\nj 7\n"))
	f.Add([]byte("kvbuf engine directory\nformat 2\n"), valid, []byte(""))
	f.Add([]byte(manifestText), bytes.Repeat([]byte{0xab}, 4200), []byte("k 0\n"))
	f.Fuzz(func(t *testing.T, manifest, bits, catalog []byte) {
		dir, err := os.MkdirTemp("", "fuzzopendir")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		mem := vfs.NewMem()
		st, err := storage.Open(filepath.Join(dir, StoreDir), &storage.Options{FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		b := st.NewBatch()
		b.SetMeta(catalogMeta, catalog)
		if err := errors.Join(st.Apply(b), st.Close()); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, BitsDir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, ManifestName), manifest)
		bitsPath := filepath.Join(dir, BitsDir, "x"+BitsExt)
		writeFile(t, bitsPath, bits)
		before := hashTree(t, dir, LockName)
		opts := &Options{FlushInterval: -1, storeFS: mem}
		db, err := Open(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotEngine) {
				t.Fatalf("Open: untyped error %v", err)
			}
			if hashTree(t, dir, LockName) != before {
				t.Fatalf("failed Open (%v) changed the directory", err)
			}
			return
		}
		for _, name := range db.Keyspaces() {
			k, err := db.KV(name)
			if err != nil {
				t.Fatalf("KV(%q) of a catalog Open accepted: %v", name, err)
			}
			if _, err := k.Get([]byte("absent")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get in %q: %v", name, err)
			}
		}
		x, err := db.Bits("x")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !errors.Is(err, bitslice.ErrCorrupt) {
				t.Fatalf("Bits: untyped error %v", err)
			}
			closeT(t, db)
			if got, _ := os.ReadFile(bitsPath); !bytes.Equal(got, bits) {
				t.Fatal("a failed Bits changed the file")
			}
			return
		}
		n, err := x.Len()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []uint64{0, n / 2, n, n + 1, 1 << 31} {
			if _, err := x.Get(i); err != nil {
				t.Fatalf("Get(%d): %v", i, err)
			}
		}
		if err := x.Set(ctx, n+5, true, 9); err != nil {
			t.Fatal(err)
		}
		k := mustKV(t, db, "fuzz")
		if err := k.Put(ctx, []byte("a"), []byte("b"), 10); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatalf("Flush of an engine Open accepted: %v", err)
		}
		closeT(t, db)
		db = openT(t, dir, opts)
		defer closeT(t, db)
		if v, err := mustBits(t, db, "x").Get(n + 5); err != nil || !v {
			t.Fatalf("bit %d after reopen = %v, %v", n+5, v, err)
		}
		wantGet(t, mustKV(t, db, "fuzz"), "a", "b")
	})
}

// validBitsImage is a small valid bitslice file with some bits set.
func validBitsImage(tb testing.TB) []byte {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "v.bits")
	f, err := bitslice.Create(p, 200)
	if err != nil {
		tb.Fatal(err)
	}
	for _, i := range []uint64{1, 64, 199} {
		if err := f.Set(i, true); err != nil {
			tb.Fatal(err)
		}
	}
	f.SetWatermark(5)
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzOps interprets its input as a sequence of engine operations (3 bytes
// each: operation, key or bit, value) and checks every read against a
// model; flushes and reopens are operations too.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 1, 0, 6, 0, 0, 2, 1, 0})
	f.Add([]byte{4, 200, 1, 7, 0, 0, 5, 200, 0, 1, 3, 0, 3, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 9, 9, 4, 9, 1, 6, 0, 0, 1, 9, 0}, 8))
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 3*400 {
			prog = prog[:3*400]
		}
		dir, err := os.MkdirTemp("", "fuzzops")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := &Options{FlushInterval: -1, MaxKeySize: 8, MaxValueSize: 8, storeFS: vfs.NewMem()}
		db := openT(t, dir, opts)
		defer func() { closeT(t, db) }()
		kv := map[string]string{}
		bits := map[uint64]bool{}
		var op, acked uint64 // op numbers handed out; highest acknowledged write
		handles := func() (*KV, *Bits) { return mustKV(t, db, "f"), mustBits(t, db, "f") }
		k, b := handles()
		for len(prog) >= 3 {
			c, x, y := prog[0], prog[1], prog[2]
			prog = prog[3:]
			key := []byte{'k', x % 16}
			if x >= 240 { // edge-case keys: empty, oversize, 0xff
				key = [][]byte{nil, bytes.Repeat([]byte{'z'}, 9), {0xff}, {0}}[x%4]
			}
			val := bytes.Repeat([]byte{y}, int(y%10)) // 8 and 9 bytes are too large
			bit := uint64(x)*37 + uint64(y%4)*100_000
			switch c % 8 {
			case 0: // put
				op++
				err := k.Put(ctx, key, val, op)
				switch {
				case len(key) == 0:
					if !errors.Is(err, ErrEmptyKey) {
						t.Fatalf("Put(empty): %v", err)
					}
				case len(key) > 8:
					if !errors.Is(err, ErrKeyTooLarge) {
						t.Fatalf("Put(long): %v", err)
					}
				case len(val) > 8:
					if !errors.Is(err, ErrValueTooLarge) {
						t.Fatalf("Put(long value): %v", err)
					}
				case err != nil:
					t.Fatalf("Put: %v", err)
				default:
					kv[string(key)] = string(val)
					acked = op
				}
			case 1: // delete
				op++
				err := k.Delete(ctx, key, op)
				if len(key) == 0 || len(key) > 8 {
					if err == nil {
						t.Fatalf("Delete(%q) accepted", key)
					}
				} else if err != nil {
					t.Fatalf("Delete: %v", err)
				} else {
					delete(kv, string(key))
					acked = op
				}
			case 2: // get
				v, err := k.Get(key)
				want, ok := kv[string(key)]
				switch {
				case len(key) == 0 || len(key) > 8:
					if err == nil {
						t.Fatalf("Get(%q) accepted", key)
					}
				case ok && (err != nil || string(v) != want):
					t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
				case !ok && !errors.Is(err, ErrNotFound):
					t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, v, err)
				}
			case 3: // scan
				it, err := k.NewIter(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for ok := it.First(); ok; ok = it.Next() {
					got = append(got, fmt.Sprintf("%q=%q", it.Key(), it.Value()))
				}
				if err := errors.Join(it.Error(), it.Close()); err != nil {
					t.Fatal(err)
				}
				var want []string
				for kk, v := range kv {
					want = append(want, fmt.Sprintf("%q=%q", kk, v))
				}
				sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
				sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("scan = %v, want %v", got, want)
				}
			case 4: // set bit
				op++
				if err := b.Set(ctx, bit, y&1 == 1, op); err != nil {
					t.Fatalf("Set(%d): %v", bit, err)
				}
				bits[bit] = y&1 == 1
				acked = op
			case 5: // get bit
				if v, err := b.Get(bit); err != nil || v != bits[bit] {
					t.Fatalf("bit %d = %v, %v; want %v", bit, v, err, bits[bit])
				}
			case 6: // flush
				if err := db.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if wm := db.Watermark(); wm != acked {
					t.Fatalf("watermark %d after flush, want %d", wm, acked)
				}
			case 7: // close and reopen
				closeT(t, db)
				db = openT(t, dir, opts)
				k, b = handles()
			}
		}
	})
}
