//go:build invariants

package buffer

import (
	"bytes"
	"strings"
	"testing"
)

// TestKVUncheckedWritePanics checks the invariants build's guard of Put's
// and Delete's precondition: the engine checks a key (and value) once,
// with CheckPut or CheckKey, before admission, and the overlay does not
// check it again; a caller that skips the check gets a panic here, not a
// bad key in a table.
func TestKVUncheckedWritePanics(t *testing.T) {
	kv := newKVRig(t, nil).kv
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"put/empty key", func() error { return kv.Put(nil, []byte("v")) }},
		{"put/key too large", func() error { return kv.Put(bytes.Repeat([]byte("k"), DefaultMaxKeySize+1), nil) }},
		{"put/value too large", func() error { return kv.Put([]byte("k"), make([]byte, DefaultMaxValueSize+1)) }},
		{"delete/empty key", func() error { return kv.Delete([]byte{}) }},
		{"delete/key too large", func() error { return kv.Delete(bytes.Repeat([]byte("k"), DefaultMaxKeySize+1)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "unchecked") {
					t.Fatalf("recovered %v, want the invariant's panic", r)
				}
			}()
			err := c.op()
			t.Fatalf("returned %v, want a panic", err)
		})
	}
	if n := kv.PendingKeys(); n != 0 {
		t.Fatalf("PendingKeys = %d after refused writes, want 0", n)
	}
}

// TestApplyAtUncheckedPanics checks the invariants build's guard of
// ApplyAt's precondition: the engine checks each change of a batch once,
// when it is added (Batch.Put, Batch.Delete, Batch.DeleteRange), and
// ApplyAt does not check it again; a caller that skips the check gets a
// panic here, not a bad key in a table.
func TestApplyAtUncheckedPanics(t *testing.T) {
	r := newKVRig(t, nil)
	kv := r.kv
	for _, c := range []struct {
		name string
		ch   Change
	}{
		{"put/empty key", Change{Kind: ChangePut, Value: []byte("v")}},
		{"put/key too large", Change{Kind: ChangePut, Key: bytes.Repeat([]byte("k"), DefaultMaxKeySize+1)}},
		{"put/value too large", Change{Kind: ChangePut, Key: []byte("k"), Value: make([]byte, DefaultMaxValueSize+1)}},
		{"delete/empty key", Change{Kind: ChangeDelete, Key: []byte{}}},
		{"delete range/lower above upper", Change{Kind: ChangeDeleteRange, Key: []byte("b"), Value: []byte("a")}},
		{"unknown kind", Change{Kind: ChangeDeleteRange + 1, Key: []byte("k")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "unchecked") {
					t.Fatalf("recovered %v, want the invariant's panic", r)
				}
			}()
			seqs := kv.seq.Reserve(2)
			defer seqs.Publish()
			good := Change{Kind: ChangePut, Key: []byte("good"), Value: []byte("v")}
			err := kv.ApplyAt(seqs.Take(2), []Change{good, c.ch})
			t.Fatalf("returned %v, want a panic", err)
		})
	}
	if n := kv.PendingKeys(); n != 0 {
		t.Fatalf("PendingKeys = %d after refused batches, want 0", n)
	}
}
