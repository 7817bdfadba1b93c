package storage

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestIterBounds scans keyspace 1, which lies between the meta namespace
// and a populated keyspace 2, with nil, empty, inner, equal and inverted
// bounds, in both directions.
func TestIterBounds(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "", "e", "a", "1", "b", "2", "c", "3", "d", "4", "\xff", "f")
	putKS(t, s, 2, "", "other", "a", "other")
	b := s.NewBatch()
	b.SetMeta("a", []byte("meta"))
	b.SetWatermark(3)
	mustApply(t, s, b)

	for _, tc := range []struct {
		lower, upper []byte
		want         []string
	}{
		{nil, nil, []string{"=e", "a=1", "b=2", "c=3", "d=4", "\xff=f"}},
		{[]byte{}, nil, []string{"=e", "a=1", "b=2", "c=3", "d=4", "\xff=f"}},
		{[]byte("b"), nil, []string{"b=2", "c=3", "d=4", "\xff=f"}},
		{nil, []byte("c"), []string{"=e", "a=1", "b=2"}},
		{[]byte("b"), []byte("d"), []string{"b=2", "c=3"}},
		{[]byte("bb"), []byte("c"), nil},
		{[]byte("d"), []byte("b"), nil}, // inverted: empty
		{[]byte("b"), []byte("b"), nil}, // equal: empty
		{[]byte("\xff"), nil, []string{"\xff=f"}},
		{nil, []byte{}, nil},
	} {
		if got := scan(t, s, tc.lower, tc.upper); !slices.Equal(got, tc.want) {
			t.Errorf("scan[%q, %q) = %q, want %q", tc.lower, tc.upper, got, tc.want)
		}
		if got := scanReverse(t, s, ks1, tc.lower, tc.upper); !slices.Equal(got, tc.want) {
			t.Errorf("reverse scan[%q, %q) = %q, want %q", tc.lower, tc.upper, got, tc.want)
		}
	}
}

func TestIterSeekGE(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2", "c", "3", "d", "4")
	it, err := s.NewIter(ks1, []byte("b"), []byte("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatal("unpositioned iterator is valid")
	}
	for _, tc := range []struct {
		seek, want string
		ok         bool
	}{
		{"", "b", true},   // below lower: clamps to lower
		{"a", "b", true},  // below lower
		{"b", "b", true},  // exact
		{"bb", "c", true}, // between keys
		{"c", "c", true},
		{"cz", "", false}, // past the last key in range
		{"d", "", false},  // at upper
		{"z", "", false},  // beyond upper
	} {
		ok := it.SeekGE([]byte(tc.seek))
		if ok != tc.ok || ok != it.Valid() || string(it.Key()) != tc.want {
			t.Errorf("SeekGE(%q) = %v at %q, want %v at %q", tc.seek, ok, it.Key(), tc.ok, tc.want)
		}
	}
	if !it.SeekGE([]byte("b")) || !it.Next() || string(it.Key()) != "c" || string(it.Value()) != "3" || it.Next() {
		t.Fatal("SeekGE+Next walk wrong")
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}

func TestIterSeekLT(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2", "c", "3", "d", "4")
	it, err := s.NewIter(ks1, []byte("b"), []byte("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for _, tc := range []struct {
		seek, want string
		ok         bool
	}{
		{"z", "c", true},  // beyond upper: clamps to upper
		{"d", "c", true},  // at upper
		{"cc", "c", true}, // between keys
		{"c", "b", true},  // exact: strictly less
		{"bb", "b", true},
		{"b", "", false}, // at lower
		{"a", "", false}, // below lower
		{"", "", false},
	} {
		ok := it.SeekLT([]byte(tc.seek))
		if ok != tc.ok || ok != it.Valid() || string(it.Key()) != tc.want {
			t.Errorf("SeekLT(%q) = %v at %q, want %v at %q", tc.seek, ok, it.Key(), tc.ok, tc.want)
		}
	}
	if !it.SeekLT([]byte("z")) || !it.Prev() || string(it.Key()) != "b" || string(it.Value()) != "2" || it.Prev() {
		t.Fatal("SeekLT+Prev walk wrong")
	}
	// Off the start, Next turns back to the first key.
	if !it.Next() || string(it.Key()) != "b" {
		t.Fatalf("Next after running off the start at %q", it.Key())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}

// TestIterUnpositioned: Next and Prev on an iterator never positioned
// return false, Key and Value nil; so does every call on an empty range.
func TestIterUnpositioned(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	for _, bounds := range [][2][]byte{{nil, nil}, {[]byte("b"), []byte("a")}, {nil, {}}} {
		it, err := s.NewIter(ks1, bounds[0], bounds[1])
		if err != nil {
			t.Fatal(err)
		}
		if it.Next() || it.Prev() || it.Valid() || it.Key() != nil || it.Value() != nil {
			t.Fatalf("%q: unpositioned iterator moved", bounds)
		}
		if it.Error() != nil {
			t.Fatal(it.Error())
		}
		if bounds[0] == nil && bounds[1] == nil {
			if !it.Last() || string(it.Key()) != "b" {
				t.Fatal("Last after Next/Prev on an unpositioned iterator")
			}
		} else if it.First() || it.Last() || it.SeekGE(nil) || it.SeekLT([]byte("z")) || it.Next() || it.Prev() {
			t.Fatalf("%q: empty range positioned", bounds)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIterSnapshotAndDeletes(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	it, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Delete(ks1, []byte("a"))
	b.Put(ks1, []byte("c"), []byte("3"))
	mustApply(t, s, b)
	// An iterator reads the state at its creation.
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("iterator saw %q, want its creation-time state [a b]", got)
	}
	if got := scan(t, s, nil, nil); !slices.Equal(got, []string{"b=2", "c=3"}) {
		t.Fatalf("new scan = %q", got)
	}
}

func TestIterClose(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1")
	it, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("First = false")
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("second Iter.Close = %v", err)
	}
	if it.First() || it.Last() || it.Next() || it.Prev() || it.SeekGE([]byte("a")) || it.SeekLT([]byte("z")) ||
		it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatal("closed iterator still positions")
	}
	if err := it.Error(); err != nil {
		t.Fatalf("Error after own Close = %v", err)
	}
}

// TestIterLeftOpenAtStoreClose: Store.Close closes iterators still open;
// they then report kverr.ErrClosed and the store closes cleanly.
func TestIterLeftOpenAtStoreClose(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	positioned, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !positioned.First() {
		t.Fatal("First = false")
	}
	unpositioned, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := s.NewIter(ks1, []byte("b"), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Store.Close with open iterators = %v, want nil", err)
	}
	for _, it := range []*Iter{positioned, unpositioned, empty} {
		if it.Valid() || it.Next() || it.Prev() || it.First() || it.Last() || it.SeekGE(nil) || it.SeekLT(nil) ||
			it.Key() != nil || it.Value() != nil {
			t.Fatal("iterator usable after Store.Close")
		}
		if err := it.Error(); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("Error after Store.Close = %v, want ErrClosed", err)
		}
		if err := it.Close(); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("Iter.Close after Store.Close = %v, want ErrClosed", err)
		}
	}
	if err := closed.Error(); err != nil {
		t.Fatalf("iterator closed before Store.Close reports %v", err)
	}
}

// TestIterSlicesOutliveStoreClose (issue 30): the key and value an
// iterator returned stay readable, unchanged, after Store.Close closed the
// iterator (they are the iterator's copies; pebble releases its block
// buffers at Close, and its race build poisons them).
func TestIterSlicesOutliveStoreClose(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		s, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		put(t, s, "a", "value of a", "b", "value of b")
		if err := s.Flush(); err != nil { // in an sstable: the block cache
			t.Fatal(err)
		}
		var r reader = s
		if snapshot {
			sn, err := s.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			r = sn
		}
		it, err := r.NewIter(ks1, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !it.SeekGE([]byte("b")) {
			t.Fatal("SeekGE(b) = false")
		}
		key, val := it.Key(), it.Value()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if string(key) != "b" || string(val) != "value of b" {
			t.Fatalf("snapshot %v: after Store.Close the slices read %q=%q, want b=value of b", snapshot, key, val)
		}
		if it.Key() != nil || it.Value() != nil || it.Next() || !errors.Is(it.Error(), kverr.ErrClosed) {
			t.Fatalf("snapshot %v: the iterator is usable after Store.Close", snapshot)
		}
	}
}
