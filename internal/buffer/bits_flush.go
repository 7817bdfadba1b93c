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
	for _, t := range g.tables {
		nw := (t.hi.Load() + 63) >> 6
		if !undo {
			if err := b.applyPages(ctx, t, nw); err != nil {
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

// walkRuns is the number of run buffers applyPages cycles through: the
// walk fills one while the writer writes the ones before.
const walkRuns = 4

// runPage is a page of a run applyPages writes: its index, its lines and
// set bits as written, and how many of its words have a pending bit.
type runPage struct {
	pi, lines, ones, changed uint64
}

// walkRun is a run of consecutive pages applyPages writes with one
// File.WriteWords: its first word, its new words and its pages.
type walkRun struct {
	start uint64
	words []uint64
	pages []runPage
}

// applyPages applies table t's words below word nw to the file: page by
// page it computes the new words from the packed ones and the file's
// (no list of word changes in between, the flush's walk of issue 26) with
// the page's summary, and hands each run of consecutive pages to a writer
// goroutine, which writes it with one File.WriteWords (pwrite into the
// page cache: no locked instruction per word, no write fault on a page the
// last sync left write-protected; the file has no other writer, wmu held,
// and every word it changes is pending in the view's tables until the
// Release, B7), starts its writeback (File.StartWriteback) and brings the
// summary of its pages up to date (B9, after their pwrite, before
// Release), while the walk computes the next runs on this processor: the
// pwrites, the writeback submissions and the sparse pages' rescans leave
// the walk's path. The walk joins the writer before it returns (B7: before
// the sync). It is write's path when no open snapshot needs the words it
// overwrites. wmu held.
func (b *Bits) applyPages(ctx context.Context, t *bitsTable, nw uint64) (err error) {
	d := t.dir.Load()
	fv := b.file.View()
	words := fv.Words()
	fw := uint64(len(words))
	tail := ^uint64(0)
	if r := fv.Len() % 64; r != 0 {
		tail = 1<<r - 1
	}
	if b.walkRuns[0] == nil {
		for k := range b.walkRuns {
			b.walkRuns[k] = &walkRun{words: make([]uint64, 0, runPagesMax*pageWords64)}
		}
	}
	free := make(chan *walkRun, walkRuns)
	for _, r := range b.walkRuns {
		r.words, r.pages = r.words[:0], r.pages[:0] // a walk that stopped early left one filled
		free <- r
	}
	todo := make(chan *walkRun, walkRuns)
	done := make(chan struct{})
	var failed atomic.Bool
	var werr error // the writer's first failure, read after done
	sum := b.summaryRun()
	defer sum.done() // B9: the pages applied, also before a failure returns
	go func() {
		defer close(done)
		for r := range todo {
			if werr == nil {
				werr = b.writeRun(r, &sum)
				failed.Store(werr != nil)
			}
			r.words, r.pages = r.words[:0], r.pages[:0]
			free <- r
		}
	}()
	defer func() { // the writer joined before the sync (B7)
		close(todo)
		<-done
		if err == nil {
			err = werr
		}
		runtime.KeepAlive(fv)
	}()
	r := <-free
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
		if len(r.words) > 0 && (r.start+uint64(len(r.words)) != first || len(r.pages) == runPagesMax) {
			if failed.Load() {
				return nil // the writer's error, after the join
			}
			todo <- r
			r = <-free
		}
		if len(r.words) == 0 {
			r.start = first
		}
		r.words = r.words[:uint64(len(r.words))+n]
		out := r.words[uint64(len(r.words))-n:]
		changed := mergePage(c, words[first:first+n], out)
		if first+n == fw {
			out[n-1] &= tail // only the file's last word has bits past its length
		}
		if changed == 0 {
			r.words = r.words[:uint64(len(r.words))-n]
			continue
		}
		lines, ones := lineSummary(out)
		r.pages = append(r.pages, runPage{uint64(pi), lines, ones, changed})
	}
	if len(r.words) > 0 {
		todo <- r
	} else {
		free <- r
	}
	return nil
}

// writeRun is applyPages' writer for one run: its pwrite, the start of its
// writeback (the disk works on it during the rest of the walk; the sync
// after the walk is still what makes it durable, B7) and its pages'
// summary (B9).
func (b *Bits) writeRun(r *walkRun, sum *sumRun) error {
	if err := b.fio.WriteWords(r.start, r.words); err != nil {
		var k uint64
		for _, p := range r.pages {
			k += p.changed
		}
		return kverr.Errorf("apply %d words: %w", k, err)
	}
	_ = b.fio.StartWriteback(r.start, uint64(len(r.words)))
	for _, p := range r.pages {
		sum.ran(p.pi, p.lines, p.ones)
	}
	return nil
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
