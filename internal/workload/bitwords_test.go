package workload

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
)

// PwriteWords leaves a file with the same words as ApplyWords of the same
// changes (runs of adjacent pages, pages after a gap, the file's short last
// page), and refuses changes out of range or out of order without writing.
func TestPwriteWords(t *testing.T) {
	const nbits = 5*pageWords*64 + 200 // five pages and a short sixth
	dir := t.TempDir()
	open := func(name string) *bitslice.File {
		f, err := bitslice.Create(filepath.Join(dir, name), nbits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := open("a"), open("b")
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []uint64
	for round := range 20 {
		var words []bitslice.WordChange
		nw := uint64(nbits+63) / 64
		for w := uint64(0); w < nw; w++ {
			// Skip page 2 in odd rounds: a gap between two runs.
			if rng.IntN(4) != 0 || (round%2 == 1 && w/pageWords == 2) {
				continue
			}
			m := rng.Uint64()
			if w == nw-1 {
				m &= 1<<(nbits%64) - 1
			}
			words = append(words, bitslice.WordChange{Word: w, Mask: m, Bits: rng.Uint64()})
		}
		if err := a.ApplyWords(words); err != nil {
			t.Fatal(err)
		}
		var err error
		if buf, err = PwriteWords(b, words, buf); err != nil {
			t.Fatal(err)
		}
		for w := uint64(0); w < nw; w++ {
			if a.Word(w) != b.Word(w) {
				t.Fatalf("round %d, word %d: PwriteWords %#x, ApplyWords %#x", round, w, b.Word(w), a.Word(w))
			}
		}
	}
	before, before3 := b.Word(0), b.Word(pageWords*3)
	for name, bad := range map[string][]bitslice.WordChange{
		"past end":     {{Word: 0, Mask: 1, Bits: ^before & 1}, {Word: 1 << 20, Mask: 1, Bits: 1}},
		"out of order": {{Word: pageWords * 3, Mask: 1, Bits: ^before3 & 1}, {Word: 0, Mask: 1, Bits: ^before & 1}},
	} {
		if _, err := PwriteWords(b, bad, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
		if b.Word(0) != before || b.Word(pageWords*3) != before3 {
			t.Errorf("%s: words written before the error", name)
		}
	}
}
