package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestKeyspaceIsolation writes the same keys, and keys that spell other
// keyspaces' stored prefixes, in neighbouring keyspaces and checks that
// Get, iterators (both directions) and deletes stay inside their keyspace.
func TestKeyspaceIsolation(t *testing.T) {
	s, _ := openMem(t)
	spaces := []KeyspaceID{1, 2, 256, math.MaxUint32 - 1, math.MaxUint32}
	keys := []string{"", "a", "\x00\x00\x00\x02", "\x02\x00\x00\x00\x02", "\xff\xff\xff\xff", "\xff"}
	b := s.NewBatch()
	for _, ks := range spaces {
		for _, k := range keys {
			b.Put(ks, []byte(k), []byte(fmt.Sprintf("%d:%s", ks, k)))
		}
	}
	mustApply(t, s, b)
	sorted := slices.Sorted(slices.Values(keys))
	for _, ks := range spaces {
		var want []string
		for _, k := range sorted {
			want = append(want, fmt.Sprintf("%s=%d:%s", k, ks, k))
			wantGetKS(t, s, ks, k, fmt.Sprintf("%d:%s", ks, k))
		}
		if got := scanKS(t, s, ks, nil, nil); !slices.Equal(got, want) {
			t.Fatalf("keyspace %d scan = %q, want %q", ks, got, want)
		}
		if got := scanReverse(t, s, ks, nil, nil); !slices.Equal(got, want) {
			t.Fatalf("keyspace %d reverse scan = %q, want %q", ks, got, want)
		}
	}
	for _, ks := range []KeyspaceID{3, 255, 257, math.MaxUint32 - 2} {
		if got := scanKS(t, s, ks, nil, nil); len(got) != 0 {
			t.Fatalf("empty keyspace %d scan = %q", ks, got)
		}
		wantNotFoundKS(t, s, ks, "a")
	}
	// Deleting every key of keyspace 2 leaves its neighbours alone.
	b = s.NewBatch()
	for _, k := range keys {
		b.Delete(2, []byte(k))
	}
	mustApply(t, s, b)
	if got := scanKS(t, s, 2, nil, nil); len(got) != 0 {
		t.Fatalf("keyspace 2 after deletes = %q", got)
	}
	for _, ks := range []KeyspaceID{1, 256} {
		if got := scanKS(t, s, ks, nil, nil); len(got) != len(keys) {
			t.Fatalf("keyspace %d after deleting keyspace 2 = %q", ks, got)
		}
	}
}

// TestOnDiskKeyLayout checks the stored keys byte for byte by reading the
// store with raw pebble: [0x02][keyspace u32 big-endian][key] for user
// keys, [0x01][name] for meta entries, "\x00wm" + 8-byte big-endian for
// the watermark. Engine directories written before keyspaces moved into
// storage used the same layout, so they still read correctly.
func TestOnDiskKeyLayout(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Put(1, []byte("a"), []byte("v1"))
	b.Put(0x01020304, []byte("\x00b"), []byte("v2"))
	b.Put(math.MaxUint32, nil, []byte("v3"))
	b.SetMeta("kvbuf/catalog", []byte("c"))
	b.SetWatermark(0x0102030405060708)
	mustApply(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := pebble.Open("db", PebbleOptions(&Options{FS: fs, ReadOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]string
	for it.First(); it.Valid(); it.Next() {
		got = append(got, [2]string{string(it.Key()), string(it.Value())})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"\x00wm", "\x01\x02\x03\x04\x05\x06\x07\x08"},
		{"\x01kvbuf/catalog", "c"},
		{"\x02\x00\x00\x00\x01a", "v1"},
		{"\x02\x01\x02\x03\x04\x00b", "v2"},
		{"\x02\xff\xff\xff\xff", "v3"},
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stored keys =\n%q\nwant\n%q", got, want)
	}

	// The other way round: keys written by raw pebble in that layout (an
	// engine directory from before) read back through the Store.
	db, err = pebble.Open("db", PebbleOptions(&Options{FS: fs}))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("\x02\x00\x00\x00\x07old"), []byte("old-value"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantGetKS(t, s, 7, "old", "old-value")
	wantGetKS(t, s, 0x01020304, "\x00b", "v2")
	wantWatermark(t, s, 0x0102030405060708)
}

// TestInvalidKeyspace: keyspace 0 is an error everywhere, never a write.
func TestInvalidKeyspace(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "k", "v")
	is := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, kverr.ErrInvalidKeyspace) {
			t.Errorf("%s = %v, want ErrInvalidKeyspace", name, err)
		}
	}
	_, err := s.Get(0, []byte("k"))
	is("Get", err)
	dst := []byte("abc")
	got, err := s.GetAppend(dst, 0, []byte("k"))
	is("GetAppend", err)
	if string(got) != "abc" {
		t.Errorf("GetAppend(keyspace 0) changed dst: %q", got)
	}
	_, err = s.NewIter(0, nil, nil)
	is("NewIter", err)
	sn, err := s.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	_, err = sn.Get(0, []byte("k"))
	is("Snapshot.Get", err)
	_, err = sn.GetAppend(nil, 0, []byte("k"))
	is("Snapshot.GetAppend", err)
	_, err = sn.NewIter(0, nil, nil)
	is("Snapshot.NewIter", err)

	for name, op := range map[string]func(b *Batch){
		"Put":                func(b *Batch) { b.Put(0, []byte("x"), []byte("v")) },
		"Delete":             func(b *Batch) { b.Delete(0, []byte("k")) },
		"DeleteRange":        func(b *Batch) { b.DeleteRange(0, nil, nil) },
		"DeleteRange(empty)": func(b *Batch) { b.DeleteRange(0, []byte("b"), []byte("a")) },
	} {
		b := s.NewBatch()
		b.Put(ks1, []byte("before"), []byte("v"))
		b.SetWatermark(5)
		op(b)
		b.Put(ks1, []byte("after"), []byte("v"))
		if b.Len() != 1 {
			t.Errorf("%s: Len = %d, want 1 (the bad op and later ones dropped)", name, b.Len())
		}
		_, err := s.Commit(b)
		is("Commit after "+name, err)
		if b.Len() != 0 {
			t.Errorf("%s: batch not emptied by the failed Commit", name)
		}
		wantNotFound(t, s, "before")
		wantNotFound(t, s, "after")
		wantGet(t, s, "k", "v")
		wantWatermark(t, s, 0)
	}
}

// TestLastKeyspace: the last keyspace ID has no successor prefix; its
// scans and whole-keyspace range deletion end at the end of the user
// namespace and leave the keyspace before it alone.
func TestLastKeyspace(t *testing.T) {
	s, _ := openMem(t)
	last := KeyspaceID(math.MaxUint32)
	putKS(t, s, last, "a", "1", "\xff\xff", "2")
	putKS(t, s, last-1, "a", "3", "\xff\xff\xff\xff\xff", "4")
	b := s.NewBatch()
	b.SetMeta("m", []byte("meta"))
	b.SetWatermark(9)
	mustApply(t, s, b)
	if got := scanKS(t, s, last, nil, nil); !slices.Equal(got, []string{"a=1", "\xff\xff=2"}) {
		t.Fatalf("scan = %q", got)
	}
	b = s.NewBatch()
	b.DeleteRange(last, nil, nil)
	mustApply(t, s, b)
	if got := scanKS(t, s, last, nil, nil); len(got) != 0 {
		t.Fatalf("scan after DeleteRange(nil, nil) = %q", got)
	}
	if got := scanKS(t, s, last-1, nil, nil); !slices.Equal(got, []string{"a=3", "\xff\xff\xff\xff\xff=4"}) {
		t.Fatalf("previous keyspace = %q", got)
	}
	if v, err := s.GetMeta("m"); err != nil || !bytes.Equal(v, []byte("meta")) {
		t.Fatalf("GetMeta = %q, %v", v, err)
	}
	wantWatermark(t, s, 9)
}
