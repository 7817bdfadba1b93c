package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/RoaringBitmap/roaring/v2"
)

// Implementation names of the rows of this file.
const (
	// ImplKvbufSetMany is W6/flush-bits-1m through Bits.SetMany: the
	// round's Sets in one call (one admission), then the Flush.
	ImplKvbufSetMany = "kvbuf-setmany"
	// ImplRoaringWriteSync is W6's roaring host: the Sets applied to a
	// bitmap holding the whole set, then the bitmap serialized to its
	// file and fsynced.
	ImplRoaringWriteSync = "roaring+write+fsync"
)

// w6BitsExtra are the rows of W6/flush-bits-1m beyond w6Bits': SetMany
// and the roaring host. Each checks what it wrote after its timed part:
// the engine's bits read back through Get, the roaring file read back and
// compared with the bitmap.
func w6BitsExtra(s *Suite, w *w6State, m mixedSides) []Impl {
	idx := make([]uint64, len(w.changes))
	vals := [2][]bool{make([]bool, len(w.changes)), make([]bool, len(w.changes))}
	for k, ch := range w.changes {
		idx[k] = ch.i
		vals[0][k] = w.flipped(k, false)
		vals[1][k] = w.flipped(k, true)
	}
	rr := &w6Roaring{path: filepath.Join(s.dir, "roaring.bin"), rb: roaring.New()}
	return []Impl{
		{Name: ImplKvbufSetMany, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r, f := w.next(w6Engine)
			v := vals[b2i(f)]
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			err := Timed(&res, func() error {
				if err := m.bits.SetMany(ctx, idx, v, 0); err != nil {
					return err
				}
				return m.db.Flush(ctx)
			})
			if err == nil {
				res.ReadBack, err = w.readBackBits(ImplKvbufSetMany, r, f, kvbufBitGetter(m.bits))
			}
			return res, err
		})},
		{Name: ImplRoaringWriteSync, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			r, f := w.next(w6RoaringBitmap)
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			err := Timed(&res, func() error {
				for k, ch := range w.changes {
					if w.flipped(k, f) {
						rr.rb.Add(uint32(ch.i))
					} else {
						rr.rb.Remove(uint32(ch.i))
					}
				}
				return rr.write()
			})
			if err == nil {
				err = rr.readBack()
			}
			if err == nil {
				// The file equals the bitmap; the sample checks that the
				// bitmap holds what the round wrote.
				res.ReadBack, err = w.readBackBits(ImplRoaringWriteSync, r, f, func(i uint64) (bool, error) { return rr.rb.Contains(uint32(i)), nil })
			}
			res.BytesPerEntry = float64(rr.rb.GetSizeInBytes()) / float64(max(rr.rb.GetCardinality(), 1))
			return res, err
		})},
	}
}

// w6Roaring is the roaring host's bitmap and its file.
type w6Roaring struct {
	path string
	rb   *roaring.Bitmap
}

// write serializes the bitmap over its file and fsyncs it: the durable
// write a host that keeps roaring in memory does at each flush. (It is
// not crash-atomic: a host that must survive a crash mid-write also
// renames a new file into place and syncs the directory, two more
// steps this row does not time.)
func (r *w6Roaring) write() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := r.rb.WriteTo(bw); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readBack reads the file and compares it with the bitmap.
func (r *w6Roaring) readBack() error {
	b, err := os.ReadFile(r.path)
	if err != nil {
		return err
	}
	got := roaring.New()
	if _, err := got.FromBuffer(b); err != nil {
		return fmt.Errorf("read back %s: %w", r.path, err)
	}
	if !got.Equals(r.rb) {
		return fmt.Errorf("%w: %s: %s holds %d bits, the bitmap %d", ErrReadBack, ImplRoaringWriteSync, r.path, got.GetCardinality(), r.rb.GetCardinality())
	}
	return nil
}
