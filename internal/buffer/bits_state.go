package buffer

import "unsafe"

// BitsState is what a Bits lookup goes through, as of one load of the
// view: for experiments that compare the state two set-ups leave behind
// (BenchmarkBitsW1State in package kvbuf, bits13).
type BitsState struct {
	Direct     bool   // the view reads the file alone
	Sealed     int    // sealed tables in the view
	Dense      bool   // the active table is probed on every lookup
	Unfiltered bool   // the active table was written past its filter's cover
	Pages      int64  // private pages installed in the active table
	DirLen     int    // the active table's directory length, in pages
	FilterLen  int    // the active table's filter length, in words
	NBits      uint64 // the file's length as of the view
	// Contiguous counts the active table's pages that follow the page
	// before them in memory (pageBytes apart): a measure of its layout.
	Contiguous int
	// FirstPage and FileWords are the addresses of the active table's
	// first private page and of the file's mapped words (0 if none), to
	// look up how they are backed.
	FirstPage, FileWords uintptr
	// Spare is whether a reset table waits to be the next active one.
	Spare bool
}

// State returns b's BitsState.
func (b *Bits) State() BitsState {
	v := b.view.Load()
	s := BitsState{Direct: v.direct, Sealed: len(v.sealed), NBits: v.nbits}
	if len(v.words) > 0 {
		s.FileWords = uintptr(unsafe.Pointer(unsafe.SliceData(v.words)))
	}
	if t := v.active; t != nil {
		s.Dense, s.Unfiltered = t.dense.Load(), t.unfiltered.Load()
		s.Pages = t.npages.Load()
		s.FilterLen = len(t.lines)
		pages := t.dir.Load().pages
		s.DirLen = len(pages)
		var prev uintptr
		for k := range pages {
			c := pages[k].Load()
			if c == nil || isShared(c) {
				prev = 0
				continue
			}
			p := uintptr(unsafe.Pointer(c))
			if s.FirstPage == 0 {
				s.FirstPage = p
			}
			if prev != 0 && p == prev+pageBytes {
				s.Contiguous++
			}
			prev = p
		}
	}
	b.vmu.Lock()
	s.Spare = b.spare != nil
	b.vmu.Unlock()
	return s
}
