package buffer

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
)

// hashedWords is the design Bits did not take, kept to measure it against the
// dense chunked table: an open-addressing hash table keyed by word index
// (linear probing, load factor <= 1/2), slots {key+1, mask, bits, pad} of 32
// bytes, read with atomic loads. It is built once and then only read.
type hashedWords struct {
	slots []hashedSlot
	shift uint
}

type hashedSlot struct{ key, mask, bits, _ uint64 }

func newHashedWords(words int) *hashedWords {
	n := 1
	for n < 2*words {
		n <<= 1
	}
	shift := uint(64)
	for m := n; m > 1; m >>= 1 {
		shift--
	}
	return &hashedWords{slots: make([]hashedSlot, n), shift: shift}
}

func (h *hashedWords) slot(w uint64) uint64 { return (w * 0x9E3779B97F4A7C15) >> h.shift }

func (h *hashedWords) set(i uint64, v bool) {
	w, bit := i>>6, uint64(1)<<(i&63)
	mask := uint64(len(h.slots) - 1)
	for s := h.slot(w); ; s = (s + 1) & mask {
		p := &h.slots[s]
		if k := atomic.LoadUint64(&p.key); k != 0 && k != w+1 {
			continue
		}
		atomic.StoreUint64(&p.key, w+1)
		if v {
			atomic.OrUint64(&p.bits, bit)
		} else {
			atomic.AndUint64(&p.bits, ^bit)
		}
		atomic.OrUint64(&p.mask, bit)
		return
	}
}

func (h *hashedWords) word(w uint64) (mask, bits uint64) {
	m := uint64(len(h.slots) - 1)
	for s := h.slot(w); ; s = (s + 1) & m {
		p := &h.slots[s]
		switch atomic.LoadUint64(&p.key) {
		case 0:
			return 0, 0
		case w + 1:
			return atomic.LoadUint64(&p.mask), atomic.LoadUint64(&p.bits)
		}
	}
}

// BenchmarkW1Design compares lookup designs on W1's with-pending data:
// dense-chunked is Bits.Get (branch-free merge of pending and file words),
// dense-branchy probes the same table but branches on the mask before reading
// the file, hashed-words is hashedWords with the branch-free merge.
func BenchmarkW1Design(b *testing.B) {
	f, err := bitslice.Create(b.TempDir()+"/w1", w1Bits)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	bits := NewBits(f, nil)
	for _, c := range w1Changes(rng, w1Sets) {
		if err := bits.Set(c.i, c.v, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := bits.Apply(context.Background(), bits.Freeze()); err != nil {
		b.Fatal(err)
	}
	bits.Release()
	lookups := make([]uint64, w1Lookups)
	for k := range lookups {
		lookups[k] = rng.Uint64N(w1Bits)
	}
	h := newHashedWords(w1Bits / 64)
	for _, c := range w1Changes(rng, w1Sets) {
		if err := bits.Set(c.i, c.v, 2); err != nil {
			b.Fatal(err)
		}
		h.set(c.i, c.v)
	}
	t := bits.active.Load()
	for _, i := range lookups {
		m, v := h.word(i >> 6)
		if want := (f.Word(i>>6)&^m|v&m)>>(i&63)&1 != 0; bits.Get(i) != want {
			b.Fatalf("designs disagree on bit %d", i)
		}
	}
	const with = "lookup-with-pending-changes/"
	b.Run(with+"dense-chunked", func(b *testing.B) {
		benchW1Lookups(b, lookups, bits.Get)
	})
	b.Run(with+"dense-branchy", func(b *testing.B) {
		benchW1Lookups(b, lookups, func(i uint64) bool {
			m, v := t.word(i >> 6)
			if bit := uint64(1) << (i & 63); m&bit != 0 {
				return v&bit != 0
			}
			return f.Get(i)
		})
	})
	b.Run(with+"hashed-words", func(b *testing.B) {
		benchW1Lookups(b, lookups, func(i uint64) bool {
			m, v := h.word(i >> 6)
			return (f.Word(i>>6)&^m|v&m)>>(i&63)&1 != 0
		})
	})
}
