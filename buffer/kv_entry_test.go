package buffer

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/kvbuf/kvbuf/storage"
)

// TestKVEntryLayout pins the layout the hit path depends on: a 40-byte entry
// header, so an entry with an 8-byte key and a 16-byte value (W2) is one
// 64-byte object, and every inline variant is exactly a Go size class.
func TestKVEntryLayout(t *testing.T) {
	if n := unsafe.Sizeof(kvEntry{}); n != 40 {
		t.Fatalf("kvEntry is %d bytes, want 40", n)
	}
	sizes := []uintptr{
		unsafe.Sizeof(inlineEntry[[8]byte]{}),
		unsafe.Sizeof(inlineEntry[[24]byte]{}),
		unsafe.Sizeof(inlineEntry[[40]byte]{}),
		unsafe.Sizeof(inlineEntry[[56]byte]{}),
		unsafe.Sizeof(inlineEntry[[88]byte]{}),
		unsafe.Sizeof(inlineEntry[[152]byte]{}),
		unsafe.Sizeof(inlineEntry[[216]byte]{}),
	}
	want := []uintptr{48, 64, 80, 96, 128, 192, 256}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("inline entry %d is %d bytes, want %d", i, sizes[i], want[i])
		}
	}
}

// inEntry reports whether p points into e's own allocation (the inline
// entry sizes are at most 256 bytes).
func inEntry(e *kvEntry, p *byte) bool {
	base := uintptr(unsafe.Pointer(e))
	q := uintptr(unsafe.Pointer(p))
	return q >= base+unsafe.Sizeof(*e) && q < base+256
}

// TestKVEntrySizes writes keys and values around every inline size class
// boundary, the coallocMax value limit, empty values and tombstones, and
// checks the pending table holds its own copies with the right bytes, small
// values inline and large ones outside the entry.
func TestKVEntrySizes(t *testing.T) {
	keyLens := []int{1, 7, 8, 9, 24, 100, 152, 216, 217, 300, 4096}
	valLens := []int{-1, 0, 1, 16, 63, 64, 65, 200, 1000}
	for _, kl := range keyLens {
		for _, vl := range valLens {
			key := bytes.Repeat([]byte{byte('a' + kl%26)}, kl)
			key[0] = byte(vl + 2)
			var val []byte
			v := tombstone
			if vl >= 0 {
				val = bytes.Repeat([]byte{byte(kl)}, vl)
				if vl > 0 {
					val[vl-1] = 0xEE
				}
				v = valOf(val)
			}
			e := newKVEntry(keyString(key), v)
			wantKey := string(key)
			wantVal := string(val)
			for i := range key {
				key[i] = 'X'
			}
			for i := range val {
				val[i] = 'Y'
			}
			if e.key != wantKey {
				t.Fatalf("key %d value %d: key %q, want %q", kl, vl, e.key, wantKey)
			}
			if e.val.del() != (vl < 0) {
				t.Fatalf("key %d value %d: tombstone = %v", kl, vl, e.val.del())
			}
			if vl < 0 {
				if e.val.bytes() != nil {
					t.Fatalf("key %d: tombstone has bytes", kl)
				}
				continue
			}
			if got := string(e.val.bytes()); got != wantVal || e.val.n != vl {
				t.Fatalf("key %d value %d: value %q (n %d), want %q", kl, vl, got, e.val.n, wantVal)
			}
			inline := kl+vl <= 216 && vl <= coallocMax
			if vl > 0 && inEntry(e, e.val.p) != inline {
				t.Fatalf("key %d value %d: value inline = %v, want %v", kl, vl, !inline, inline)
			}
			vin := 0
			if vl <= coallocMax {
				vin = vl
			}
			if inKey := kl+vin <= 216; inEntry(e, unsafe.StringData(e.key)) != inKey {
				t.Fatalf("key %d value %d: key inline = %v, want %v", kl, vl, !inKey, inKey)
			}
		}
	}
}

// TestKVGetAppend covers GetAppend on every path: pending value, pending
// tombstone, frozen set, stored value, absent key, key prefix, bad keys and a
// closed store; on error dst comes back unchanged.
func TestKVGetAppend(t *testing.T) {
	s := openStore(t)
	kv := NewKV(s, &Options{KeyPrefix: []byte("p/"), MaxKeySize: 16})
	dst := []byte("dst:")
	check := func(key, want string, wantErr error) {
		t.Helper()
		got, err := kv.GetAppend(dst, []byte(key))
		if wantErr != nil {
			if !errors.Is(err, wantErr) || string(got) != "dst:" {
				t.Fatalf("GetAppend(%q) = %q, %v; want dst unchanged and %v", key, got, err, wantErr)
			}
			return
		}
		if err != nil || string(got) != "dst:"+want {
			t.Fatalf("GetAppend(%q) = %q, %v; want %q", key, got, err, "dst:"+want)
		}
		g2, err := kv.Get([]byte(key))
		if err != nil || string(g2) != want {
			t.Fatalf("Get(%q) = %q, %v; want %q", key, g2, err, want)
		}
	}
	kv.Put([]byte("stored"), []byte("S"), 1)
	kv.Put([]byte("gone"), []byte("G"), 1)
	flushKV(t, kv, 1)
	if v, err := s.Get([]byte("p/stored")); err != nil || string(v) != "S" {
		t.Fatalf("store under prefix: %q, %v", v, err)
	}
	kv.Put([]byte("frozen"), []byte("F"), 2)
	kv.Delete([]byte("gone"), 2)
	kv.Freeze()
	kv.Put([]byte("active"), []byte("A"), 3)
	kv.Put([]byte("empty"), nil, 3)
	check("active", "A", nil)
	check("frozen", "F", nil)
	check("stored", "S", nil)
	check("empty", "", nil)
	check("gone", "", storage.ErrNotFound)
	check("absent", "", storage.ErrNotFound)
	check("", "", ErrEmptyKey)
	check("0123456789abcdefX", "", ErrKeyTooLarge)
	// The result never aliases the table: writing to it changes nothing.
	got, _ := kv.GetAppend(nil, []byte("active"))
	got[0] = 'Z'
	check("active", "A", nil)
	s.Close()
	check("active", "A", nil)
	check("stored", "", storage.ErrClosed)
}

// TestKVGetAppendNoAlloc: a pending hit appended into a buffer with room
// allocates nothing, and Get allocates only the returned copy.
func TestKVGetAppendNoAlloc(t *testing.T) {
	kv := NewKV(openStore(t), nil)
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
		kv.Put(keys[i], make([]byte, 16), uint64(i+1))
	}
	buf := make([]byte, 0, 64)
	i := 0
	n := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = kv.GetAppend(buf[:0], keys[i%len(keys)]); err != nil || len(buf) != 16 {
			t.Fatalf("GetAppend: %d bytes, %v", len(buf), err)
		}
		i++
	})
	if n != 0 {
		t.Fatalf("GetAppend of a pending value allocates %v times", n)
	}
	n = testing.AllocsPerRun(100, func() {
		if v, err := kv.Get(keys[i%len(keys)]); err != nil || len(v) != 16 {
			t.Fatalf("Get: %d bytes, %v", len(v), err)
		}
		i++
	})
	if n != 1 {
		t.Fatalf("Get of a pending value allocates %v times, want 1 (the copy)", n)
	}
}
