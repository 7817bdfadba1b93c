package workload

import (
	"fmt"

	"github.com/kvbuf/kvbuf/bitslice"
)

// pageWords is a 4 KiB page of a bitslice's data, in words.
const pageWords = 512

// PwriteWords is W6's best raw-file baseline for applying coalesced bits:
// it applies words (sorted by Word, as coalescing yields them) to f the
// way an engineer who knows the mapping's cost would, with no store
// through the mapping (the first store into a page after a sync takes a
// write fault): each 4 KiB page that holds a change is copied from the
// mapping, changed, and written back together with the pages next to it
// by one pwrite (File.WriteWords), whatever the length of the run. The
// caller syncs. f must have no other writer while it runs, and no reader
// that needs the changed bits before it returns (WriteWords's contract).
// buf is scratch space, returned for reuse.
func PwriteWords(f *bitslice.File, words []bitslice.WordChange, buf []uint64) ([]uint64, error) {
	v := f.View()
	if v == nil {
		return buf, fmt.Errorf("workload: PwriteWords on a closed file")
	}
	cur := v.Words()
	buf = buf[:0]
	var start uint64
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := f.WriteWords(start, buf)
		buf = buf[:0]
		return err
	}
	for k := 0; k < len(words); {
		w := words[k].Word
		if w >= uint64(len(cur)) || (k > 0 && w <= words[k-1].Word) {
			return buf, fmt.Errorf("workload: PwriteWords: word %d out of range or out of order", w)
		}
		first := w / pageWords * pageWords
		if len(buf) > 0 && start+uint64(len(buf)) != first {
			if err := write(); err != nil {
				return buf, err
			}
		}
		if len(buf) == 0 {
			start = first
		}
		base := uint64(len(buf))
		buf = append(buf, cur[first:min(first+pageWords, uint64(len(cur)))]...)
		for ; k < len(words) && words[k].Word/pageWords == first/pageWords; k++ {
			wc := words[k]
			if wc.Word >= uint64(len(cur)) {
				return buf, fmt.Errorf("workload: PwriteWords: word %d out of range", wc.Word)
			}
			x := &buf[base+wc.Word-first]
			*x = *x&^wc.Mask | wc.Bits&wc.Mask
		}
	}
	return buf, write()
}
