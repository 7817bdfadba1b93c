package storage

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRandomBatchesAgainstModel applies random batches of puts, deletes,
// meta entries and watermarks, with flushes and reopens in between, and
// checks every read against a map.
func TestRandomBatchesAgainstModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	fs := vfs.NewMem()
	open := func() *Store {
		s, err := Open("db", &Options{FS: fs, MemTableSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { _ = s.Close() }()

	// Keys from a small alphabet with the bytes that could confuse the tag
	// scheme, so that keys repeat, share prefixes and spell internal keys.
	alphabet := []byte{0x00, 0x01, 0x02, 0x03, 'w', 'm', 0xff}
	randKey := func() []byte {
		k := make([]byte, rng.IntN(4))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	user := map[string]string{}
	meta := map[string]string{}
	var wm uint64

	for round := range 60 {
		b := s.NewBatch()
		for range rng.IntN(50) {
			k := randKey()
			switch r := rng.IntN(10); {
			case r < 6:
				v := fmt.Sprintf("v%d-%d", round, rng.IntN(1000))
				b.Put(k, []byte(v))
				user[string(k)] = v
			case r < 9:
				b.Delete(k)
				delete(user, string(k))
			default:
				v := fmt.Sprintf("m%d", round)
				b.SetMeta(string(k), []byte(v))
				meta[string(k)] = v
			}
		}
		if rng.IntN(2) == 0 {
			op := rng.Uint64N(1000)
			b.SetWatermark(op)
			wm = max(wm, op)
		}
		mustApply(t, s, b)

		switch rng.IntN(10) {
		case 0:
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
		}
		check(t, s, user, meta, wm, randKey)
	}
}

func check(t *testing.T, s *Store, user, meta map[string]string, wm uint64, randKey func() []byte) {
	t.Helper()
	for range 50 {
		k := randKey()
		got, err := s.Get(k)
		want, ok := user[string(k)]
		if ok != (err == nil) || (ok && string(got) != want) || (!ok && !errors.Is(err, ErrNotFound)) {
			t.Fatalf("Get(%q) = %q, %v; model %q, %v", k, got, err, want, ok)
		}
		gotM, err := s.GetMeta(string(k))
		wantM, ok := meta[string(k)]
		if ok != (err == nil) || (ok && string(gotM) != wantM) {
			t.Fatalf("GetMeta(%q) = %q, %v; model %q, %v", k, gotM, err, wantM, ok)
		}
	}
	wantWatermark(t, s, wm)

	lower, upper := randKey(), randKey()
	if len(lower) == 0 {
		lower = nil // unbounded; an empty non-nil lower means the same
	}
	if len(upper) == 0 {
		upper = nil
	}
	var want []string
	for _, k := range slices.Sorted(maps.Keys(user)) {
		if (lower == nil || k >= string(lower)) && (upper == nil || k < string(upper)) {
			want = append(want, k+"="+user[k])
		}
	}
	got := scan(t, s, lower, upper)
	if !slices.Equal(got, want) {
		t.Fatalf("scan[%q, %q) =\n%q\nmodel\n%q", lower, upper, got, want)
	}
}
