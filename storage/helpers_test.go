package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openMem opens a store on a fresh in-memory filesystem and closes it at
// the end of the test.
func openMem(t testing.TB) (*Store, vfs.FS) {
	t.Helper()
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, fs
}

func mustApply(t testing.TB, s *Store, b *Batch) {
	t.Helper()
	if err := s.Apply(b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func put(t testing.TB, s *Store, kv ...string) {
	t.Helper()
	b := s.NewBatch()
	for i := 0; i+1 < len(kv); i += 2 {
		b.Put([]byte(kv[i]), []byte(kv[i+1]))
	}
	mustApply(t, s, b)
}

func wantGet(t testing.TB, s *Store, key, want string) {
	t.Helper()
	got, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("Get(%q) = %q, want %q", key, got, want)
	}
}

func wantNotFound(t testing.TB, s *Store, key string) {
	t.Helper()
	got, err := s.Get([]byte(key))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, got, err)
	}
}

func wantWatermark(t testing.TB, s *Store, want uint64) {
	t.Helper()
	got, err := s.Watermark()
	if err != nil || got != want {
		t.Fatalf("Watermark() = %d, %v; want %d", got, err, want)
	}
}

// scan returns all user key/value pairs in [lower, upper) as "k=v" strings.
func scan(t testing.TB, s *Store, lower, upper []byte) []string {
	t.Helper()
	it, err := s.NewIter(lower, upper)
	if err != nil {
		t.Fatalf("NewIter: %v", err)
	}
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatalf("Iter.Close: %v", err)
	}
	return out
}
