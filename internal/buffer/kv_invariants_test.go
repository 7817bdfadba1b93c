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
