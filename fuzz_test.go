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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/storage"
)

// FuzzOpenDir opens engine directories with a fuzzed manifest, bitslice
// file and keyspace catalog (the store is on a MemFS, so an execution costs
// milliseconds). Open must either fail with a typed error and change
// nothing, or give an engine that works: reads, writes, a flush and a
// reopen that keeps them.
func FuzzOpenDir(f *testing.F) {
	valid := validBitsImage(f)
	f.Add([]byte(manifestReadyText), valid, []byte("k 1\n"))
	f.Add([]byte(manifestReadyText), valid[:100], []byte("k 1\nj 7\n"))
	f.Add([]byte("kvbuf engine directory\nformat 1\n"), valid, []byte(""))
	f.Add([]byte("kvbuf engine directory\nformat 3\n"), valid, []byte(""))
	f.Add([]byte(manifestReadyText), bytes.Repeat([]byte{0xab}, 4200), []byte("k 0\n"))
	f.Add([]byte(manifestInitText), valid, []byte("a 1\n@dropped 2\n@next 9\n"))
	f.Add([]byte(manifestReadyText), valid, []byte("a 3\nb 1\n@dropped 2\n"))
	f.Fuzz(func(t *testing.T, manifest, bits, catalog []byte) {
		dir, err := os.MkdirTemp("", "fuzzopendir")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		mem := vfs.NewMem()
		st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), &storage.Options{FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		b := st.NewBatch()
		b.SetMeta(enginedir.CatalogMeta, catalog)
		b.SetMeta(enginedir.EngineIDMeta, enginedir.EncodeEngineID(fuzzEngineID))
		// A stale key under id 2 (dropped in some seeds): it must not
		// surface in any keyspace unless the catalog maps a name to 2.
		b.Put(2, []byte("stale"), []byte("x"))
		if err := errors.Join(st.Apply(b), st.Close()); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, enginedir.BitsDir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, enginedir.ManifestName), manifest)
		bitsPath := filepath.Join(dir, enginedir.BitsDir, "x"+enginedir.BitsExt)
		writeFile(t, bitsPath, bits)
		before := hashTree(t, dir)
		opts := &Options{FlushInterval: -1, storeFS: mem}
		db, err := Open(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotEngine) {
				t.Fatalf("Open: untyped error %v", err)
			}
			if errors.Is(err, ErrCorrupt) && bytes.Equal(manifest, []byte(manifestReadyText)) {
				// The store is fine: only the catalog or the bitslice can
				// be at fault, and each says so.
				_, cerr := enginedir.ParseCatalog(catalog)
				if cerr == nil && !errors.Is(err, ErrCorruptBits) && !strings.Contains(err.Error(), `bitslice "x"`) {
					t.Fatalf("Open: %v, but the catalog parses and the bitslice is not blamed", err)
				}
			}
			if hashTree(t, dir) != before {
				t.Fatalf("failed Open (%v) changed the directory: %v", err, listTree(dir))
			}
			return
		}
		cat, cerr := enginedir.ParseCatalog(catalog)
		if cerr != nil && len(bytes.TrimSpace(catalog)) > 0 {
			t.Fatalf("Open accepted a catalog ParseCatalog refuses (%v): %q", cerr, catalog)
		}
		if cerr == nil {
			if got, want := db.Keyspaces(), cat.Names(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Fatalf("Keyspaces = %q, catalog has %q", got, want)
			}
		}
		for _, name := range db.Keyspaces() {
			k := mustKV(t, db, name)
			v, err := k.Get([]byte("stale"))
			switch {
			case err == nil && cat.Keyspaces[name] != 2:
				t.Fatalf("keyspace %q (id %d) shows another keyspace's key: %q", name, cat.Keyspaces[name], v)
			case err != nil && !errors.Is(err, ErrNotFound):
				t.Fatalf("Get in %q: %v", name, err)
			}
		}
		x, err := db.Bits("x")
		if err != nil {
			t.Fatalf("Bits of a bitslice Open accepted: %v", err)
		}
		n, err := x.Len()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x.Count()
		ones := 0
		for range x.Ones(0) {
			ones++
		}
		if uint64(ones) != c {
			t.Fatalf("Count %d, Ones yields %d", c, ones)
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
		wantBit(t, mustBits(t, db, "x"), n+5, true)
		wantGet(t, mustKV(t, db, "fuzz"), "a", "b")
		if wm := db.Watermark(); wm != 9 {
			t.Fatalf("watermark %d, want 9", wm)
		}
	})
}

// validBitsImage is a small valid bitslice file with some bits set.
// fuzzEngineID is the engine id of FuzzOpenDir's engines, and the owner of
// validBitsImage.
const fuzzEngineID = 0xf022

func validBitsImage(tb testing.TB) []byte {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "v.bits")
	f, err := bitslice.CreateOwned(p, 200, fuzzEngineID)
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

// opsModel is FuzzOps' model of the engine: keyspace "f", bitslice "f",
// and the op bookkeeping behind the watermark.
type opsModel struct {
	kv   map[string]string
	bits *bitsModel
	// hi is the highest op admitted, closed the highest op closed (by a
	// batch, EndOp), claimed the watermark the next freeze may write.
	hi, closed, claimed uint64
}

// claim is the flusher's claim rule at a freeze.
func (m *opsModel) claim() {
	m.claimed = max(m.claimed, m.closed)
	if m.hi > 0 {
		m.claimed = max(m.claimed, m.hi-1)
	}
}

// FuzzOps interprets its input as a sequence of engine operations (3 bytes
// each: operation, then two argument bytes) on one keyspace and one
// bitslice, and checks every read, the watermark and redelivered (skipped)
// writes against a model. Operations: put, delete, get, scan (forward or reverse, with
// bounds), set bit, get bit and Count, flush, reopen, range delete,
// SetRange, a batch, a snapshot (taken, then checked and closed), DropKV,
// EndOp with GetMany.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 1, 0, 6, 0, 0, 2, 1, 0})
	f.Add([]byte{4, 200, 1, 7, 0, 0, 5, 200, 0, 1, 3, 0, 3, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 9, 9, 4, 9, 1, 6, 0, 0, 1, 9, 0}, 8))
	f.Add([]byte{0, 1, 1, 0, 2, 2, 11, 0, 0, 8, 1, 5, 10, 3, 4, 6, 0, 0, 11, 0, 0, 3, 1, 2})
	f.Add([]byte{0, 1, 1, 12, 0, 0, 2, 1, 0, 0, 1, 7, 7, 0, 0, 2, 1, 0, 3, 0, 0})
	f.Add([]byte{9, 3, 200, 5, 3, 0, 6, 0, 0, 9, 3, 5, 13, 7, 0, 6, 0, 0, 7, 0, 0, 5, 3, 0})
	f.Add([]byte{0, 2, 2, 0, 3, 3 | 0x80, 6, 0, 0, 1, 3, 0x80, 13, 0, 1, 6, 0, 0, 0, 3, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 3*400 {
			prog = prog[:3*400]
		}
		dir, err := os.MkdirTemp("", "fuzzops")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := &Options{FlushInterval: -1, MaxKeySize: 8, MaxValueSize: 8, MaxBits: 1 << 20, storeFS: vfs.NewMem()}
		db := openT(t, dir, opts)
		defer func() { closeT(t, db) }()
		m := &opsModel{kv: map[string]string{}, bits: newBitsModel()}
		var op uint64 // the last op number used
		var snap *Snapshot
		var snapModel kvModel
		var snapBits *bitsModel
		handles := func() (*KV, *Bits) { return mustKV(t, db, "f"), mustBits(t, db, "f") }
		k, b := handles()
		keyOf := func(x byte) []byte {
			if x >= 240 { // edge-case keys: empty, oversize, 0xff, 0x00
				return [][]byte{nil, bytes.Repeat([]byte{'z'}, 9), {0xff}, {0}}[x%4]
			}
			return []byte{'k', x % 16}
		}
		badKey := func(key []byte) bool { return len(key) == 0 || len(key) > 8 }
		// nextOp returns the op number of a write: a new one, or (with the
		// high bit of y) the previous one again, which is skipped as a
		// redelivered op once a flush persisted it.
		nextOp := func(y byte) (uint64, bool) {
			if y&0x80 == 0 || op == 0 {
				op++
			}
			return op, op <= m.claimed
		}
		admit := func(o uint64, closes bool) {
			m.hi = max(m.hi, o)
			if closes {
				m.closed = max(m.closed, o)
			}
		}
		checkStale := func(what string, err error, stale bool) bool {
			t.Helper()
			if stale {
				// Flushes wait here, so claimed ops are persisted: a
				// redelivered op, skipped (nil, nothing changes).
				if err != nil {
					t.Fatalf("%s of persisted op %d (claimed %d): %v, want nil (skipped)", what, op, m.claimed, err)
				}
				return true
			}
			if errors.Is(err, ErrStaleOp) {
				t.Fatalf("%s of op %d (claimed %d): ErrStaleOp", what, op, m.claimed)
			}
			return false
		}
		bounds := func(x, y byte) ([]byte, []byte) {
			var lo, hi []byte
			if x%5 != 0 {
				lo = []byte{'k', x % 17}
			}
			if y%5 != 0 {
				hi = []byte{'k', y % 17}
			}
			return lo, hi
		}
		inRange := func(key string, lo, hi []byte) bool {
			return (lo == nil || key >= string(lo)) && (hi == nil || key < string(hi))
		}
		for len(prog) >= 3 {
			c, x, y := prog[0], prog[1], prog[2]
			prog = prog[3:]
			key := keyOf(x)
			val := bytes.Repeat([]byte{y}, int(y%10)) // 9 bytes is too large
			bit := uint64(x)*37 + uint64(y%4)*100_000
			switch c % 14 {
			case 0: // put
				o, stale := nextOp(y)
				err := k.Put(ctx, key, val, o)
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
				case checkStale("Put", err, stale):
				case err != nil:
					t.Fatalf("Put: %v", err)
				default:
					m.kv[string(key)] = string(val)
					admit(o, false)
				}
			case 1: // delete
				o, stale := nextOp(y)
				err := k.Delete(ctx, key, o)
				switch {
				case badKey(key):
					if !errors.Is(err, ErrEmptyKey) && !errors.Is(err, ErrKeyTooLarge) {
						t.Fatalf("Delete(%q): %v", key, err)
					}
				case checkStale("Delete", err, stale):
				case err != nil:
					t.Fatalf("Delete: %v", err)
				default:
					delete(m.kv, string(key))
					admit(o, false)
				}
			case 2: // get
				v, err := k.Get(key)
				want, ok := m.kv[string(key)]
				switch {
				case badKey(key):
					if !errors.Is(err, ErrEmptyKey) && !errors.Is(err, ErrKeyTooLarge) {
						t.Fatalf("Get(%q): %v", key, err)
					}
				case ok && (err != nil || string(v) != want):
					t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
				case !ok && !errors.Is(err, ErrNotFound):
					t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, v, err)
				}
			case 3: // scan
				lo, hi := bounds(x, y)
				o := &IterOptions{LowerBound: lo, UpperBound: hi}
				if lo != nil && hi != nil && string(lo) > string(hi) {
					if _, err := k.NewIter(o); !errors.Is(err, ErrBadRange) {
						t.Fatalf("NewIter%q: %v, want ErrBadRange", [][]byte{lo, hi}, err)
					}
					continue
				}
				var want []string
				for _, kk := range slices.Sorted(maps.Keys(m.kv)) {
					if inRange(kk, lo, hi) {
						want = append(want, kk+"="+m.kv[kk])
					}
				}
				got := scan(t, k, o)
				if y&1 == 1 {
					got = scanReverse(t, k, o)
					slices.Reverse(want)
				}
				if !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Fatalf("scan%q = %q, want %q", [][]byte{lo, hi}, got, want)
				}
			case 4: // set bit
				o, stale := nextOp(y)
				err := b.Set(ctx, bit, y&1 == 1, o)
				if !checkStale("Set", err, stale) {
					if err != nil {
						t.Fatalf("Set(%d): %v", bit, err)
					}
					m.bits.apply(bit, bit+1, y&1 == 1)
					admit(o, false)
				}
			case 5: // get bit, count
				if v, err := b.Get(bit); err != nil || v != m.bits.get(bit) {
					t.Fatalf("bit %d = %v, %v; want %v", bit, v, err, m.bits.get(bit))
				}
				if n, err := b.Count(); err != nil || n != uint64(m.bits.n) {
					t.Fatalf("Count = %d, %v; want %d", n, err, m.bits.n)
				}
			case 6: // flush
				if err := db.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				m.claim()
				if wm := db.Watermark(); wm != m.claimed {
					t.Fatalf("watermark %d after flush, want %d (hi %d, closed %d)", wm, m.claimed, m.hi, m.closed)
				}
			case 7: // close and reopen
				closeT(t, db)
				m.claim() // Close's final flush
				if snap != nil {
					sk, _ := snap.KV("f")
					if _, err := sk.Get([]byte("k")); !errors.Is(err, ErrClosed) {
						t.Fatalf("snapshot read after the engine closed: %v", err)
					}
					snap = nil
				}
				db = openT(t, dir, opts)
				k, b = handles()
				if wm := db.Watermark(); wm != m.claimed {
					t.Fatalf("watermark %d after reopen, want %d", wm, m.claimed)
				}
				// A new session knows no op above the watermark.
				m.hi, m.closed = m.claimed, m.claimed
			case 8: // range delete
				lo, hi := bounds(x, y&0x7f)
				o, stale := nextOp(y)
				err := k.DeleteRange(ctx, lo, hi, o)
				switch {
				case lo != nil && hi != nil && string(lo) > string(hi):
					if !errors.Is(err, ErrBadRange) {
						t.Fatalf("DeleteRange%q: %v, want ErrBadRange", [][]byte{lo, hi}, err)
					}
				case checkStale("DeleteRange", err, stale):
				case err != nil:
					t.Fatal(err)
				default:
					for kk := range m.kv {
						if inRange(kk, lo, hi) {
							delete(m.kv, kk)
						}
					}
					admit(o, false)
				}
			case 9: // SetRange
				lo := uint64(x) * 131
				hi := lo + uint64(y%70)
				if y%70 == 69 {
					hi = 1<<20 + 1 // past MaxBits
				}
				o, stale := nextOp(y)
				err := b.SetRange(ctx, lo, hi, y&1 == 1, o)
				switch {
				case hi > 1<<20:
					if !errors.Is(err, ErrOutOfRange) {
						t.Fatalf("SetRange past MaxBits: %v", err)
					}
				case checkStale("SetRange", err, stale):
				case err != nil:
					t.Fatal(err)
				default:
					m.bits.apply(lo, hi, y&1 == 1)
					admit(o, false)
				}
			case 10: // batch: put, delete of another key, a bit, maybe a bad key
				o, stale := nextOp(y)
				k2 := keyOf(y)
				bt := db.NewBatch()
				bt.Put(k, key, val)
				bt.Delete(k, k2)
				bt.Set(b, bit, true)
				err := db.Apply(ctx, bt, o)
				switch {
				case badKey(key) || badKey(k2) || len(val) > 8:
					if err == nil || errors.Is(err, ErrStaleOp) {
						t.Fatalf("batch with a bad change: %v", err)
					}
				case checkStale("Apply", err, stale):
				case err != nil:
					t.Fatal(err)
				default:
					m.kv[string(key)] = string(val)
					if !bytes.Equal(key, k2) {
						delete(m.kv, string(k2))
					} else {
						delete(m.kv, string(key)) // later change wins
					}
					m.bits.apply(bit, bit+1, true)
					admit(o, true)
				}
			case 11: // snapshot: take one, or check and close the one taken
				if snap == nil {
					snap, err = db.NewSnapshot()
					if err != nil {
						t.Fatal(err)
					}
					snapModel, snapBits = maps.Clone(m.kv), m.bits.clone()
					continue
				}
				sk, err := snap.KV("f")
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				for _, kk := range slices.Sorted(maps.Keys(snapModel)) {
					want = append(want, kk+"="+snapModel[kk])
				}
				if got := scan(t, sk, nil); !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Fatalf("snapshot scan = %q, want %q", got, want)
				}
				sb, err := snap.Bits("f")
				if err != nil {
					t.Fatal(err)
				}
				if n, err := sb.Count(); err != nil || n != uint64(snapBits.n) {
					t.Fatalf("snapshot Count = %d, %v; want %d", n, err, snapBits.n)
				}
				if v, err := sb.Get(bit); err != nil || v != snapBits.get(bit) {
					t.Fatalf("snapshot bit %d = %v, %v", bit, v, err)
				}
				snap.Close()
				snap = nil
			case 12: // drop the keyspace and start it again
				o, stale := nextOp(y)
				err := db.DropKV(ctx, "f", o)
				if !checkStale("DropKV", err, stale) {
					if err != nil {
						t.Fatal(err)
					}
					if _, err := k.Get([]byte("k")); !errors.Is(err, ErrDropped) {
						t.Fatalf("Get through a dropped handle: %v", err)
					}
					clear(m.kv)
					admit(o, false)
					k = mustKV(t, db, "f")
				}
			case 13: // EndOp of the last op; GetMany of every key
				err := db.EndOp(ctx, op)
				switch {
				case op > m.hi && op > m.claimed:
					// Its writes were refused (or it is a new session):
					// never begun.
					if !errors.Is(err, ErrBadOp) {
						t.Fatalf("EndOp(%d) of an op never begun (highest %d): %v, want ErrBadOp", op, m.hi, err)
					}
				case err != nil:
					t.Fatal(err)
				case op > m.claimed:
					m.closed = max(m.closed, op)
				}
				keys := make([][]byte, 17)
				for i := range keys {
					keys[i] = []byte{'k', byte(i)}
				}
				vals := make([][]byte, len(keys))
				// A non-nil buf: with a nil one an empty value comes back
				// as nil (TestGetManyEmptyValueIsNotAbsent).
				if _, err := k.GetMany(keys, vals, make([]byte, 0, 8)); err != nil {
					t.Fatal(err)
				}
				for i, kk := range keys {
					want, ok := m.kv[string(kk)]
					if ok != (vals[i] != nil) || ok && string(vals[i]) != want {
						t.Fatalf("GetMany(%q) = %q, want %q (present %v)", kk, vals[i], want, ok)
					}
				}
			}
		}
		if snap != nil {
			snap.Close()
		}
	})
}
