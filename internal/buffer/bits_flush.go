package buffer

import (
	"context"

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

// applyPages applies table t's words below word nw to the file page by
// page, straight from the packed words (File.ApplyPacked: no list of word
// changes and no unpacked copy in between, the flush's walk of issue 26),
// and brings the summary of each page it wrote up to date right after
// (B9, before Release) from what the same pass read of the page's words.
// It is write's path when no open snapshot needs the words it overwrites.
// wmu held.
func (b *Bits) applyPages(ctx context.Context, t *bitsTable, nw uint64) error {
	d := t.dir.Load()
	fw := (b.fio.Len() + 63) >> 6 // the file's words
	sum := b.summaryRun()
	defer sum.done() // B9: the pages applied, also before a failure returns
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
		run, err := b.fio.ApplyPacked(first, c[:2*n])
		if err != nil {
			return kverr.Errorf("apply %d words: %w", packedChanged(c, n), err)
		}
		if run.Changed > 0 {
			sum.ran(uint64(pi), run)
		}
	}
	return nil
}

// packedChanged is the number of the first n words of page c with a
// pending bit (for an error message).
func packedChanged(c *bitsPage, n uint64) int {
	k := 0
	for j := range n {
		if m, _ := pageWord64(c, j<<1); m != 0 {
			k++
		}
	}
	return k
}
