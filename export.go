package kvbuf

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/snapstream"
)

// Snapshot streams: Snapshot.Export writes one, Install reads one into a new
// engine. A replicated host (package raftkv) sends them to a replica whose
// log is behind the leader's truncated log. The format, its encoder and its
// checking decoder are package internal/snapstream's; this file holds the
// engine's side: reading a snapshot in the stream's order, writing a
// stream's content into a new engine.

// Export writes the snapshot to w as a stream that Install reads (format
// above): every keyspace with its pairs and every bitslice with its set
// bits and length, as of the snapshot, and op as the stream's watermark. It
// reads the snapshot as it writes, holding at most one frame (64 KiB, or
// one pair if larger) in memory, and returns the number of bytes written.
//
// op is the host's claim that the snapshot holds every write of the ops up
// to op and none of a later op; Install makes it the new engine's
// watermark. A host that applies its ops one after another from one
// goroutine takes the snapshot between two ops and passes the last applied
// one (raftkv passes its applied raft index).
//
// Errors: ErrNilArgument for a nil w (nothing written), ErrClosed if the
// snapshot or the engine is closed, ctx.Err(), and w's errors, as they
// happen (w has then received part of a stream, which Install refuses).
func (s *Snapshot) Export(ctx context.Context, w io.Writer, op uint64) (int64, error) {
	if w == nil {
		return 0, kverr.Errorf("export: writer: %w", ErrNilArgument)
	}
	sw, err := snapstream.NewWriter(w, op)
	if err != nil {
		return sw.Written(), kverr.Errorf("export: %w", err)
	}
	d := digest.New()
	if err := s.eachKV(ctx, d, sw.Keyspace, sw.Pair); err != nil {
		return sw.Written(), err
	}
	if err := s.eachBits(ctx, d, sw.Bitslice, sw.Word, nil); err != nil {
		return sw.Written(), err
	}
	if err := sw.Close(d); err != nil {
		return sw.Written(), kverr.Errorf("export: %w", err)
	}
	return sw.Written(), nil
}

// eachKV feeds d every keyspace of the snapshot and its pairs, in order,
// calling ks and pair (if not nil) for each as well.
func (s *Snapshot) eachKV(ctx context.Context, d *digest.Hasher, ks func(string) error, pair func(k, v []byte) error) error {
	for _, name := range sortedNames(s.kvs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		d.Keyspace(name)
		if ks != nil {
			if err := ks(name); err != nil {
				return kverr.Errorf("export: %w", err)
			}
		}
		r, err := s.KV(name)
		if err != nil {
			return err
		}
		it, err := r.NewIter(nil)
		if err != nil {
			return err
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			d.Pair(it.Key(), it.Value())
			if pair != nil {
				if err := pair(it.Key(), it.Value()); err != nil {
					_ = it.Close()
					return kverr.Errorf("export keyspace %q: %w", name, err)
				}
			}
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					_ = it.Close()
					return err
				}
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// eachBits feeds d every bitslice of the snapshot and its nonzero words,
// in order, calling bs, word and end (if not nil) for each bitslice, word
// and at the end of each bitslice as well.
func (s *Snapshot) eachBits(ctx context.Context, d *digest.Hasher, bs func(name string, n uint64) error, word func(w, bits uint64) error, end func() error) error {
	for _, name := range sortedNames(s.bits) {
		r, err := s.Bits(name)
		if err != nil {
			return err
		}
		n, err := r.Len()
		if err != nil {
			return err
		}
		d.Bitslice(name)
		if bs != nil {
			if err := bs(name, n); err != nil {
				return kverr.Errorf("export: %w", err)
			}
		}
		var cur, bits uint64
		have := false
		emit := func() error {
			if !have {
				return nil
			}
			d.Word(cur, bits)
			if word != nil {
				return word(cur, bits)
			}
			return nil
		}
		k := 0
		for i := range r.Ones(0) {
			if w := i / 64; !have || w != cur {
				if err := emit(); err != nil {
					return kverr.Errorf("export bitslice %q: %w", name, err)
				}
				have, cur, bits = true, w, 0
			}
			bits |= 1 << (i % 64)
			if k++; k%(1<<16) == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		if err := r.s.isClosed(); err != nil {
			return err // Ones ends early, without an error, on close
		}
		if err := emit(); err != nil {
			return kverr.Errorf("export bitslice %q: %w", name, err)
		}
		if end != nil {
			if err := end(); err != nil {
				return kverr.Errorf("export bitslice %q: %w", name, err)
			}
		}
	}
	return nil
}

// Digest returns the content digest of the snapshot: a 128-bit hash over
// every keyspace (name, then each key and value in key order) and every
// bitslice (name, then each set bit), as 32 hex digits. Two engines, or
// one engine at two times, have the same digest exactly when they hold the
// same keyspaces with the same pairs and the same bitslices with the same
// set bits (up to hash collisions); watermarks, bitslice lengths and what
// is pending or flushed do not enter it. kvtool inspect --digest computes
// the same digest from a closed engine's files, and Export's trailer
// carries it. It reads the whole snapshot. Errors: ErrClosed, ctx.Err().
func (s *Snapshot) Digest(ctx context.Context) (string, error) {
	d := digest.New()
	if err := s.eachKV(ctx, d, nil, nil); err != nil {
		return "", err
	}
	if err := s.eachBits(ctx, d, nil, nil, nil); err != nil {
		return "", err
	}
	sum, err := d.Sum()
	if err != nil {
		return "", err // ErrOrder: a bug in the snapshot's order
	}
	return sum.String(), nil
}

// Install creates a new engine in dir from a stream written by
// Snapshot.Export and returns the stream's op, which is the new engine's
// watermark: every keyspace and bitslice of the stream, with its pairs,
// set bits and length, is durable in dir when Install returns nil, and the
// engine is closed (Open it to use it). Memory stays bounded: the stream is
// read a frame at a time and written through the engine's pending buffer,
// which flushes as it fills (Options.MaxPendingBytes); opts are the new
// engine's options (nil: defaults).
//
// dir must not exist or be an empty directory (an error wrapping
// fs.ErrExist otherwise, and dir is left alone). To replace a host's live
// engine, install into a new directory and switch to it with one durable
// step of the host's own (raftkv switches a pointer in its raft log store),
// so that a crash leaves either the old engine or the new one.
//
// A nil r is ErrNilArgument, with dir left alone.
//
// Errors (dir is then removed, with everything Install wrote): errors
// matching ErrBadStream and ErrCorrupt for a corrupt, truncated
// (io.ErrUnexpectedEOF too) or inconsistent stream; the engine's write
// errors (ErrBadName, ErrKeyTooLarge, ErrValueTooLarge, ErrOutOfRange for
// content opts cannot hold); r's read errors; ctx.Err().
func Install(ctx context.Context, dir string, r io.Reader, opts *Options) (op uint64, err error) {
	if r == nil {
		return 0, kverr.Errorf("install into %s: reader: %w", dir, ErrNilArgument)
	}
	if err := checkInstallDir(dir); err != nil {
		return 0, err
	}
	db, err := Open(dir, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return 0, kverr.Errorf("install into %s: %w", dir, err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = kverr.Errorf("install into %s: %w", dir, cerr)
		}
		if err != nil {
			op = 0
			_ = os.RemoveAll(dir)
		}
	}()
	in := &installer{db: db, batch: db.NewBatch()}
	op, err = snapstream.Decode(ctx, r, db.opts.MaxKeySize+db.opts.MaxValueSize+2*snapstream.FrameSize, in)
	if err != nil {
		return 0, kverr.Errorf("install into %s: %w", dir, err)
	}
	// The stream's op, as an empty batch: it begins and ends the op, so the
	// next flush claims it (the content's writes are of no op).
	if err := db.Apply(ctx, db.NewBatch(), op); err != nil {
		return 0, kverr.Errorf("install into %s: %w", dir, err)
	}
	if err := db.Flush(ctx); err != nil {
		return 0, kverr.Errorf("install into %s: %w", dir, err)
	}
	if wm := db.Watermark(); wm != op {
		return 0, kverr.Errorf("install into %s: watermark %d after the flush, want the stream's op %d", dir, wm, op)
	}
	return op, nil
}

// checkInstallDir refuses a dir that exists and is not an empty directory.
func checkInstallDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return kverr.Errorf("install into %s: %w", dir, err)
	case len(ents) > 0:
		return kverr.Errorf("install into %s: not empty: %w", dir, fs.ErrExist)
	}
	return nil
}

// installer writes a stream's content into a fresh engine: the
// snapstream.Sink of Install.
type installer struct {
	db    *DB
	batch *Batch
	kv    *KV   // the open keyspace
	bits  *Bits // the open bitslice
}

// installBatchBytes bounds the data of one batch written while installing.
const installBatchBytes = 1 << 20

// Keyspace implements snapstream.Sink.
func (in *installer) Keyspace(ctx context.Context, name string) error {
	kv, err := in.db.KV(name)
	in.kv = kv
	return err
}

// Pair implements snapstream.Sink.
func (in *installer) Pair(ctx context.Context, key, value []byte) error {
	in.batch.Put(in.kv, key, value)
	return in.maybeApply(ctx)
}

// Bitslice implements snapstream.Sink.
func (in *installer) Bitslice(ctx context.Context, name string, n uint64) error {
	b, err := in.db.Bits(name)
	in.bits, in.kv = b, nil
	return err
}

// SetBits implements snapstream.Sink.
func (in *installer) SetBits(ctx context.Context, i, run uint64) error {
	if run == 1 {
		in.batch.Set(in.bits, i, true)
	} else {
		in.batch.SetRange(in.bits, i, i+run, true)
	}
	return in.maybeApply(ctx)
}

// EndBitslice implements snapstream.Sink: the bitslice's length is set by
// clearing its last bit if no set bit reaches it.
func (in *installer) EndBitslice(ctx context.Context, n, hi uint64) error {
	if n > hi {
		in.batch.Set(in.bits, n-1, false)
	}
	in.bits = nil
	return in.apply(ctx)
}

// End implements snapstream.Sink.
func (in *installer) End(ctx context.Context) error { return in.apply(ctx) }

// maybeApply writes the batch once it is large.
func (in *installer) maybeApply(ctx context.Context) error {
	if len(in.batch.data) < installBatchBytes && in.batch.Len() < 4096 {
		return nil
	}
	return in.apply(ctx)
}

// apply writes the batch. Its changes are ops of no number (0): the
// stream's op becomes the watermark with one empty batch of it at the end,
// so no flush before it claims a watermark for part of the stream.
func (in *installer) apply(ctx context.Context) error {
	if in.batch.Len() == 0 {
		return in.batch.Err()
	}
	err := in.db.Apply(ctx, in.batch, 0)
	in.batch.Reset()
	return err
}
