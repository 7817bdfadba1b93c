package storage

import (
	"slices"
	"testing"
)

// TestDeleteRange checks range deletion bounds (inclusive lower, exclusive
// upper, nil for the keyspace's start or end, empty and inverted ranges)
// through Get, forward and reverse iterators and a snapshot taken before,
// and that neighbouring keyspaces, meta entries and the watermark survive
// a whole-keyspace drop.
func TestDeleteRange(t *testing.T) {
	keys := []string{"", "a", "b", "bb", "c", "d", "\xff"}
	all := func() []string {
		var out []string
		for _, k := range keys {
			out = append(out, k+"=v"+k)
		}
		return out
	}
	without := func(gone ...string) []string {
		return slices.DeleteFunc(all(), func(kv string) bool {
			for _, g := range gone {
				if kv == g+"=v"+g {
					return true
				}
			}
			return false
		})
	}
	for _, tc := range []struct {
		name         string
		lower, upper []byte
		want         []string
	}{
		{"inner", []byte("b"), []byte("c"), without("b", "bb")},
		{"lower-inclusive-upper-exclusive", []byte("a"), []byte("d"), without("a", "b", "bb", "c")},
		{"nil-lower", nil, []byte("b"), without("", "a")},
		{"empty-lower", []byte{}, []byte("b"), without("", "a")},
		{"nil-upper", []byte("c"), nil, without("c", "d", "\xff")},
		{"whole-keyspace", nil, nil, nil},
		{"empty-range", []byte("b"), []byte("b"), all()},
		{"inverted", []byte("c"), []byte("a"), all()},
		{"nil-lower-empty-upper", nil, []byte{}, all()},
		{"no-keys-in-range", []byte("bc"), []byte("bz"), all()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openMem(t)
			for _, ks := range []KeyspaceID{1, 2, 3} {
				b := s.NewBatch()
				for _, k := range keys {
					b.Put(ks, []byte(k), []byte("v"+k))
				}
				mustApply(t, s, b)
			}
			b := s.NewBatch()
			b.SetMeta("m", []byte("meta"))
			b.SetWatermark(4)
			mustApply(t, s, b)
			sn, err := s.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()

			b = s.NewBatch()
			b.DeleteRange(2, tc.lower, tc.upper)
			wantLen := 1
			if slices.Equal(tc.want, all()) && tc.name != "no-keys-in-range" {
				wantLen = 0 // empty ranges add nothing
			}
			if b.Len() != wantLen {
				t.Fatalf("Len = %d, want %d", b.Len(), wantLen)
			}
			mustApply(t, s, b)
			for round := range 2 {
				if got := scanKS(t, s, 2, nil, nil); !slices.Equal(got, tc.want) {
					t.Fatalf("round %d: scan = %q, want %q", round, got, tc.want)
				}
				if got := scanReverse(t, s, 2, nil, nil); !slices.Equal(got, tc.want) {
					t.Fatalf("round %d: reverse scan = %q, want %q", round, got, tc.want)
				}
				for _, k := range keys {
					if slices.Contains(tc.want, k+"=v"+k) {
						wantGetKS(t, s, 2, k, "v"+k)
					} else {
						wantNotFoundKS(t, s, 2, k)
					}
					// Neighbours and the snapshot are untouched.
					wantGetKS(t, s, 1, k, "v"+k)
					wantGetKS(t, s, 3, k, "v"+k)
					wantGetKS(t, sn, 2, k, "v"+k)
				}
				if got := scanKS(t, sn, 2, nil, nil); !slices.Equal(got, all()) {
					t.Fatalf("snapshot scan = %q", got)
				}
				if got := scanReverse(t, sn, 2, nil, nil); !slices.Equal(got, all()) {
					t.Fatalf("snapshot reverse scan = %q", got)
				}
				if v, err := s.GetMeta("m"); err != nil || string(v) != "meta" {
					t.Fatalf("GetMeta = %q, %v", v, err)
				}
				wantWatermark(t, s, 4)
				// Again from sstables.
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestDeleteRangeOrder: a range deletion hides what was written before it,
// in earlier batches and earlier in its own batch, and nothing written
// after it.
func TestDeleteRangeOrder(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "old", "b", "old")
	b := s.NewBatch()
	b.Put(ks1, []byte("c"), []byte("before"))
	b.DeleteRange(ks1, nil, nil)
	b.Put(ks1, []byte("b"), []byte("after"))
	mustApply(t, s, b)
	if got := scan(t, s, nil, nil); !slices.Equal(got, []string{"b=after"}) {
		t.Fatalf("scan = %q, want [b=after]", got)
	}
	put(t, s, "a", "new")
	if got := scan(t, s, nil, nil); !slices.Equal(got, []string{"a=new", "b=after"}) {
		t.Fatalf("scan = %q", got)
	}
}
