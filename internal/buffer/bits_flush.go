package buffer

import (
	"context"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// applyBatch bounds the word changes applied (and the undo recorded) at once.
const applyBatch = 1 << 16

// Write applies the generation to the file: grow it if a change lies beyond
// its end, apply the changes (oldest table first, page by page, whole
// words), stage wm as the file's watermark and sync (data, then the
// header). If an open snapshot needs the words it overwrites, it records
// them first (see BitsSnapshot). It may be called again after a failure: it
// is idempotent. The order is B7 of bits_protocol.go.
func (g *BitsGen) Write(ctx context.Context, wm uint64) error { return g.write(ctx, wm, false) }

// WriteLagged is Write with the file synced by one fdatasync
// (bitslice.File.SyncLagged) instead of two: the file's header then
// records the watermark of the previous write, whose words are durable,
// and this one's only at the next. For an owner whose receipt is kept
// elsewhere and written after WriteLagged returns (the engine's store, B7).
func (g *BitsGen) WriteLagged(ctx context.Context, wm uint64) error { return g.write(ctx, wm, true) }

func (g *BitsGen) write(ctx context.Context, wm uint64, lagged bool) error {
	b := g.b
	b.wmu.Lock()
	defer b.wmu.Unlock()
	var hi uint64
	for _, t := range g.tables {
		hi = max(hi, t.hi.Load())
	}
	if hi > b.fio.Len() {
		if err := b.fio.Grow(hi); err != nil {
			return kverr.Errorf("grow to %d bits: %w", hi, err)
		}
	}
	if fv := b.file.View(); fv != nil && fv.Len() != b.view.Load().nbits {
		b.refreshFile() // B7: the new words before any is applied
		b.growSummary(fv.Len())
	}
	undo := b.needUndo(g.g)
	// The writeback helper of the walks (applyPages), joined before the
	// sync (B7; and on a failure before wmu is released, so that it never
	// outlives the file's lock).
	var wb *writeback
	defer func() {
		if wb != nil {
			wb.join()
		}
	}()
	for _, t := range g.tables {
		nw := (t.hi.Load() + 63) >> 6
		if !undo {
			if wb == nil {
				wb = b.startWriteback()
			}
			if err := b.applyPages(ctx, t, nw, wb); err != nil {
				return err
			}
			continue
		}
		// An open snapshot needs the words this write overwrites (B10):
		// the changes go through a list, which recordUndo keeps.
		for w := uint64(0); w < nw; {
			if err := ctx.Err(); err != nil {
				return err
			}
			var words []bitslice.WordChange
			words, w = t.appendWords(b.scratch[:0], w, nw, applyBatch)
			b.scratch = words[:0]
			if len(words) == 0 {
				continue
			}
			b.recordUndo(g.g, words) // B10
			if err := b.fio.ApplyWords(words); err != nil {
				return kverr.Errorf("apply %d words: %w", len(words), err)
			}
			b.summarizeWords(words) // B9: before Release
		}
	}
	if wb != nil {
		// Every run's writeback started before the sync: leaving the
		// helper's last ranges to the sync did not make the walk and
		// sync faster (bitsflush19, BenchmarkBitsWalkSync).
		wb.join()
		wb = nil
	}
	b.fio.SetWatermark(wm)
	sync := b.fio.Sync
	if lagged {
		sync = b.fio.SyncLagged
	}
	if err := sync(); err != nil {
		return kverr.Errorf("sync: %w", err)
	}
	return nil
}

// runPagesMax is the most pages applyPages writes with one WriteWords.
const runPagesMax = 8

// handoffPages is the fewest pages applyPages hands its writeback helper at
// once (consecutive runs, each already written): one run of runPagesMax
// pages, so every full run is handed off as soon as it is written.
// bitsflush19 kept 32 (4 hand-offs a W6 flush instead of 16), which its
// paired walk-and-sync rounds put 2% ahead at load 5.6; two quiet runs of
// BenchmarkBitsW6 then put the Flush alone at 0.78x pwrite-words+sync
// against 0.82-0.83x with a hand-off a run (doc/bench/2026-12-07-quiet10).
const handoffPages = runPagesMax

// runPage is a page of a run applyPages writes: its index, its lines and
// set bits as written, and how many of its words have a pending bit.
type runPage struct {
	pi, lines, ones, changed uint64
}

// applyPages applies table t's words below word nw to the file: page by
// page it computes the new words from the packed ones and the file's
// (no list of word changes in between, the flush's walk of issue 26) with
// the page's summary, and writes each run of consecutive pages with one
// File.WriteWords (pwrite into the page cache: no locked instruction per
// word, no write fault on a page the last sync left write-protected; the
// file has no other writer, wmu held, and every word it changes is
// pending in the view's tables until the Release, B7). The summary of the
// pages written is brought up to date right after each run (B9, before
// Release). wb starts each run's writeback while the walk computes the
// next ones. It is write's path when no open snapshot needs the words it
// overwrites. wmu held.
func (b *Bits) applyPages(ctx context.Context, t *bitsTable, nw uint64, wb *writeback) error {
	d := t.dir.Load()
	fv := b.file.View()
	words := fv.Words()
	fw := uint64(len(words))
	tail := ^uint64(0)
	if r := fv.Len() % 64; r != 0 {
		tail = 1<<r - 1
	}
	if b.runWords == nil {
		b.runWords = make([]uint64, 0, runPagesMax*pageWords64)
	}
	buf, pages := b.runWords[:0], b.runPages[:0]
	var start uint64
	var wbFirst, wbN uint64 // the runs written and not yet handed to wb
	sum := b.summaryRun()
	defer sum.done() // B9: the pages applied, also before a failure returns
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := b.fio.WriteWords(start, buf); err != nil {
			var k uint64
			for _, p := range pages {
				k += p.changed
			}
			return kverr.Errorf("apply %d words: %w", k, err)
		}
		// The disk starts on these runs while the walk computes the next
		// ones; the sync after the walk is still what makes them durable
		// (B7).
		if wbN > 0 && wbFirst+wbN != start {
			wb.start(wbFirst, wbN)
			wbN = 0
		}
		if wbN == 0 {
			wbFirst = start
		}
		wbN += uint64(len(buf))
		if wbN >= wb.handoff {
			wb.start(wbFirst, wbN)
			wbN = 0
		}
		for _, p := range pages {
			sum.ran(p.pi, p.lines, p.ones)
		}
		buf, pages = buf[:0], pages[:0]
		return nil
	}
	for pi := range d.pages {
		first := uint64(pi) * pageWords64
		if first >= nw {
			break
		}
		c := d.pages[pi].Load()
		if c == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The whole page as far as the file goes: its words past the
		// table's last have empty masks, and the summary needs them.
		n := min(pageWords64, fw-first)
		if len(buf) > 0 && (start+uint64(len(buf)) != first || len(pages) == runPagesMax) {
			if err := write(); err != nil {
				return err
			}
		}
		if len(buf) == 0 {
			start = first
		}
		buf = buf[:uint64(len(buf))+n]
		out := buf[uint64(len(buf))-n:]
		changed := mergePage(c, words[first:first+n], out)
		if first+n == fw {
			out[n-1] &= tail // only the file's last word has bits past its length
		}
		lines, ones := lineSummary(out)
		if changed == 0 {
			buf = buf[:uint64(len(buf))-n]
			continue
		}
		pages = append(pages, runPage{uint64(pi), lines, ones, changed})
	}
	err := write()
	if wbN > 0 {
		wb.start(wbFirst, wbN)
	}
	runtime.KeepAlive(fv)
	b.runWords, b.runPages = buf[:0], pages[:0]
	return err
}

// writeback is the flush's writeback helper: a goroutine that starts the
// writeback of each run the walk wrote (File.StartWriteback) on another
// processor while the walk computes the next runs (the submission costs
// about what the walk does). It makes nothing durable: the sync after the
// walk is what does (B7), so a range started late, or never, changes
// nothing a reader or a crash sees.
type writeback struct {
	handoff uint64 // the fewest words a hand-off holds (handoffPages)
	runs    chan [2]uint64
	done    chan struct{}
}

// startWriteback starts the flush's writeback helper; the flush joins it
// before it releases wmu. wmu held.
func (b *Bits) startWriteback() *writeback {
	w := &writeback{handoff: handoffPages * pageWords64, runs: make(chan [2]uint64, 64), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for r := range w.runs {
			_ = b.fio.StartWriteback(r[0], r[1])
		}
	}()
	return w
}

// start hands the helper the run of n words from word first.
func (w *writeback) start(first, n uint64) { w.runs <- [2]uint64{first, n} }

// join waits for the helper to start every range it was handed, and stops
// it.
func (w *writeback) join() {
	close(w.runs)
	<-w.done
}

// mergePage computes into out the new words of a page: for each word j,
// the file's word file[j] with page c's pending bits of that word over it
// (c's packed words 2j and 2j+1), and returns how many words have a
// pending bit. out and file are the page's words as far as the file goes
// (the same length, at most pageWords64). The flush's inner loop (issue
// 26): no branch per word, and a full page's loop has no bounds check.
func mergePage(c *bitsPage, file, out []uint64) (changed uint64) {
	if len(file) == pageWords64 && len(out) == pageWords64 {
		f, o := (*[pageWords64]uint64)(file), (*[pageWords64]uint64)(out)
		for j := range pageWords64 {
			// pageWord64 written out: its index masks cost 6-8% of the
			// walk's CPU here (BenchmarkBitsWalk, 3 paired runs).
			p0 := atomic.LoadUint64(&c[2*j])
			p1 := atomic.LoadUint64(&c[2*j+1])
			m := p0>>32 | p1&^lowHalf
			v := p0&lowHalf | p1<<32
			o[j] = atomic.LoadUint64(&f[j])&^m | v&m
			changed += b2u(m != 0)
		}
		return changed
	}
	out = out[:len(file)]
	for j := range file {
		m, v := pageWord64(c, uint64(j)<<1)
		out[j] = atomic.LoadUint64(&file[j])&^m | v&m
		changed += b2u(m != 0)
	}
	return changed
}

// lineSummary returns the line bits and the set bits of a page's words
// (at most pageWords64).
func lineSummary(ws []uint64) (lines, ones uint64) {
	for l := 0; l*lineWords < len(ws); l++ {
		line := ws[l*lineWords : min((l+1)*lineWords, len(ws))]
		var or uint64
		for _, x := range line {
			or |= x
			ones += uint64(bits.OnesCount64(x))
		}
		lines |= b2u(or != 0) << l
	}
	return lines, ones
}
