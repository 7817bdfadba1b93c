package storage

import (
	"errors"
	"slices"
	"testing"
)

func TestIterBounds(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "", "e", "a", "1", "b", "2", "c", "3", "d", "4", "\xff", "f")
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
		{[]byte("d"), []byte("b"), nil}, // empty range
		{[]byte("\xff"), nil, []string{"\xff=f"}},
		{nil, []byte{}, nil},
	} {
		if got := scan(t, s, tc.lower, tc.upper); !slices.Equal(got, tc.want) {
			t.Errorf("scan[%q, %q) = %q, want %q", tc.lower, tc.upper, got, tc.want)
		}
	}
}

func TestIterSeekGE(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2", "c", "3", "d", "4")
	it, err := s.NewIter([]byte("b"), []byte("d"))
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

func TestIterSnapshotAndDeletes(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	it, err := s.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Delete([]byte("a"))
	b.Put([]byte("c"), []byte("3"))
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
	it, err := s.NewIter(nil, nil)
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
	if it.First() || it.Next() || it.SeekGE([]byte("a")) || it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatal("closed iterator still positions")
	}
	if err := it.Error(); err != nil {
		t.Fatalf("Error after own Close = %v", err)
	}
}

// TestIterLeftOpenAtStoreClose: Store.Close closes iterators still open;
// they then report ErrClosed and the store closes cleanly.
func TestIterLeftOpenAtStoreClose(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	positioned, err := s.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !positioned.First() {
		t.Fatal("First = false")
	}
	unpositioned, err := s.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := s.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Store.Close with open iterators = %v, want nil", err)
	}
	for _, it := range []*Iter{positioned, unpositioned} {
		if it.Valid() || it.Next() || it.First() || it.SeekGE(nil) || it.Key() != nil || it.Value() != nil {
			t.Fatal("iterator usable after Store.Close")
		}
		if err := it.Error(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Error after Store.Close = %v, want ErrClosed", err)
		}
		if err := it.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Iter.Close after Store.Close = %v, want ErrClosed", err)
		}
	}
	if err := closed.Error(); err != nil {
		t.Fatalf("iterator closed before Store.Close reports %v", err)
	}
}
