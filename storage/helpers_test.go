package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// ks1 is the keyspace the single-keyspace tests use.
const ks1 KeyspaceID = 1

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

func mustCommit(t testing.TB, s *Store, b *Batch) *Commit {
	t.Helper()
	c, err := s.Commit(b)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return c
}

// put applies key/value pairs to keyspace ks1.
func put(t testing.TB, s *Store, kv ...string) {
	t.Helper()
	putKS(t, s, ks1, kv...)
}

func putKS(t testing.TB, s *Store, ks KeyspaceID, kv ...string) {
	t.Helper()
	b := s.NewBatch()
	for i := 0; i+1 < len(kv); i += 2 {
		b.Put(ks, []byte(kv[i]), []byte(kv[i+1]))
	}
	mustApply(t, s, b)
}

// reader is what Store and Snapshot have in common, for helpers that check
// both.
type reader interface {
	Get(ks KeyspaceID, key []byte) ([]byte, error)
	NewIter(ks KeyspaceID, lower, upper []byte) (*Iter, error)
}

func wantGet(t testing.TB, r reader, key, want string) {
	t.Helper()
	wantGetKS(t, r, ks1, key, want)
}

func wantGetKS(t testing.TB, r reader, ks KeyspaceID, key, want string) {
	t.Helper()
	got, err := r.Get(ks, []byte(key))
	if err != nil {
		t.Fatalf("Get(%d, %q): %v", ks, key, err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("Get(%d, %q) = %q, want %q", ks, key, got, want)
	}
}

func wantNotFound(t testing.TB, r reader, key string) {
	t.Helper()
	wantNotFoundKS(t, r, ks1, key)
}

func wantNotFoundKS(t testing.TB, r reader, ks KeyspaceID, key string) {
	t.Helper()
	got, err := r.Get(ks, []byte(key))
	if !errors.Is(err, kverr.ErrNotFound) {
		t.Fatalf("Get(%d, %q) = %q, %v; want ErrNotFound", ks, key, got, err)
	}
}

func wantWatermark(t testing.TB, s *Store, want uint64) {
	t.Helper()
	got, err := s.Watermark()
	if err != nil || got != want {
		t.Fatalf("Watermark() = %d, %v; want %d", got, err, want)
	}
}

// scan returns all key/value pairs of keyspace ks1 in [lower, upper) as
// "k=v" strings.
func scan(t testing.TB, r reader, lower, upper []byte) []string {
	t.Helper()
	return scanKS(t, r, ks1, lower, upper)
}

func scanKS(t testing.TB, r reader, ks KeyspaceID, lower, upper []byte) []string {
	t.Helper()
	it, err := r.NewIter(ks, lower, upper)
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

// scanReverse is scanKS walking from Last with Prev, returned in ascending
// order so that it compares equal to scanKS.
func scanReverse(t testing.TB, r reader, ks KeyspaceID, lower, upper []byte) []string {
	t.Helper()
	it, err := r.NewIter(ks, lower, upper)
	if err != nil {
		t.Fatalf("NewIter: %v", err)
	}
	var out []string
	for ok := it.Last(); ok; ok = it.Prev() {
		out = append(out, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatalf("Iter.Close: %v", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
