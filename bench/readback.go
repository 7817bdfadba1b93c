package bench

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// DefaultReadBack is the default Config.ReadBack: how many of the values a
// write row wrote in a round it reads back afterwards.
const DefaultReadBack = 1000

// readBackSample returns the indexes, among n values written in a round,
// that a write row reads back after it: every one when want is negative or
// at least n, else want of them spread evenly, starting at an offset that
// moves with the round (round) so that successive rounds check different
// values.
func readBackSample(n, want int, round uint64) []int {
	if n <= 0 {
		return nil
	}
	if want < 0 || want >= n {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	want = max(want, 1)
	stride := n / want
	out := make([]int, 0, want)
	for i := int(round % uint64(stride)); i < n && len(out) < want; i += stride {
		out = append(out, i)
	}
	return out
}

// kvGetter reads one user key of a key-value implementation, appending the
// value it finds to dst.
type kvGetter func(dst, key []byte) (val []byte, found bool, err error)

// kvbufGetter reads kv through the engine's API (pending or stored).
func kvbufGetter(kv *kvbuf.KV) kvGetter {
	return func(dst, key []byte) ([]byte, bool, error) {
		v, err := kv.GetAppend(dst, key)
		if err != nil {
			if notFound(err) {
				return dst, false, nil
			}
			return dst, false, err
		}
		return v, true, nil
	}
}

// pebbleGetter reads a user key from raw pebble, where the baselines keep
// it in the store's key layout (storedKey).
func pebbleGetter(pdb *pebble.DB) kvGetter {
	var sk []byte
	return func(dst, key []byte) ([]byte, bool, error) {
		sk = storedKey(sk[:0], key)
		return pebbleGet(pdb, dst, sk)
	}
}

// readBackKV reads back, with get, the keys key(i) for every i of idx and
// compares each with want(i) (nil: the key must be absent). It returns the
// number of keys checked, or an error wrapping ErrReadBack naming the row
// and the first key that differs.
func readBackKV(row string, idx []int, key, want func(i int) []byte, get kvGetter) (int64, error) {
	var buf []byte
	for _, i := range idx {
		k, w := key(i), want(i)
		v, found, err := get(buf[:0], k)
		if err != nil {
			return 0, fmt.Errorf("bench: %s: read back key %x: %w", row, k, err)
		}
		switch {
		case w == nil && found:
			return 0, fmt.Errorf("%w: %s: key %x was deleted but holds %x", ErrReadBack, row, k, v)
		case w != nil && !found:
			return 0, fmt.Errorf("%w: %s: key %x was written (%x) but is missing", ErrReadBack, row, k, w)
		case w != nil && !bytes.Equal(v, w):
			return 0, fmt.Errorf("%w: %s: key %x holds %x, %x was written", ErrReadBack, row, k, v, w)
		}
		buf = v
	}
	return int64(len(idx)), nil
}

// bitGetter reads one bit of a bitslice implementation.
type bitGetter func(i uint64) (bool, error)

func kvbufBitGetter(b *kvbuf.Bits) bitGetter { return b.Get }

func rawBitGetter(f *bitslice.File) bitGetter {
	return func(i uint64) (bool, error) { return f.Get(i), nil }
}

// readBackBits reads back the bits at(i) for every i of idx and compares
// each with want(i), as readBackKV does.
func readBackBits(row string, idx []int, at func(i int) uint64, want func(i int) bool, get bitGetter) (int64, error) {
	for _, i := range idx {
		b := at(i)
		v, err := get(b)
		if err != nil {
			return 0, fmt.Errorf("bench: %s: read back bit %d: %w", row, b, err)
		}
		if v != want(i) {
			return 0, fmt.Errorf("%w: %s: bit %d is %t, %t was written", ErrReadBack, row, b, v, want(i))
		}
	}
	return int64(len(idx)), nil
}
