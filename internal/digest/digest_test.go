package digest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sum(t *testing.T, feed func(d *Hasher)) Sum {
	t.Helper()
	d := New()
	feed(d)
	s, err := d.Sum()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Bits fed one at a time and as words hash alike; empty input, an empty
// keyspace and an empty bitslice all differ.
func TestBitsAndWords(t *testing.T) {
	byBit := sum(t, func(d *Hasher) {
		d.Bitslice("b")
		for _, i := range []uint64{0, 1, 63, 64, 200} {
			d.Bit(i)
		}
	})
	byWord := sum(t, func(d *Hasher) {
		d.Bitslice("b")
		d.Word(0, 1|2|1<<63)
		d.Word(1, 1)
		d.Word(2, 0) // zero words are skipped
		d.Word(3, 1<<8)
	})
	if byBit != byWord {
		t.Fatalf("bits %s, words %s", byBit, byWord)
	}
	seen := map[Sum]string{}
	for name, feed := range map[string]func(*Hasher){
		"nothing":        func(*Hasher) {},
		"empty keyspace": func(d *Hasher) { d.Keyspace("b") },
		"empty bits":     func(d *Hasher) { d.Bitslice("b") },
		"pair":           func(d *Hasher) { d.Keyspace("b"); d.Pair([]byte("k"), []byte("v")) },
		"split pair":     func(d *Hasher) { d.Keyspace("b"); d.Pair([]byte("kv"), nil) },
		"bits":           func(d *Hasher) { d.Bitslice("b"); d.Bit(1) },
	} {
		s := sum(t, feed)
		if other, ok := seen[s]; ok {
			t.Fatalf("%s and %s have the same digest", name, other)
		}
		seen[s] = name
	}
	if len(byBit.String()) != 32 {
		t.Fatalf("String() = %q", byBit.String())
	}
}

func TestOrder(t *testing.T) {
	for name, feed := range map[string]func(*Hasher){
		"keyspaces":          func(d *Hasher) { d.Keyspace("b"); d.Keyspace("a") },
		"same keyspace":      func(d *Hasher) { d.Keyspace("a"); d.Keyspace("a") },
		"keys":               func(d *Hasher) { d.Keyspace("a"); d.Pair([]byte("b"), nil); d.Pair([]byte("a"), nil) },
		"pair first":         func(d *Hasher) { d.Pair([]byte("a"), nil) },
		"keyspace after":     func(d *Hasher) { d.Bitslice("a"); d.Keyspace("b") },
		"pair in bits":       func(d *Hasher) { d.Keyspace("a"); d.Bitslice("b"); d.Pair([]byte("a"), nil) },
		"bitslices":          func(d *Hasher) { d.Bitslice("b"); d.Bitslice("a") },
		"bits":               func(d *Hasher) { d.Bitslice("a"); d.Bit(5); d.Bit(5) },
		"bit first":          func(d *Hasher) { d.Bit(5) },
		"word first":         func(d *Hasher) { d.Word(5, 1) },
		"word after bit":     func(d *Hasher) { d.Bitslice("a"); d.Bit(70); d.Word(1, 1) },
		"bit in a past word": func(d *Hasher) { d.Bitslice("a"); d.Word(2, 1); d.Bit(130) },
	} {
		d := New()
		feed(d)
		if _, err := d.Sum(); !errors.Is(err, ErrOrder) {
			t.Errorf("%s: Sum() error %v, want ErrOrder", name, err)
		}
	}
}

func TestDirMissing(t *testing.T) {
	if _, err := Dir(context.Background(), filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("digest of a missing directory")
	}
}
