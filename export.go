package kvbuf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	mbits "math/bits"
	"os"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Snapshot streams: Snapshot.Export writes one, Install reads one into a new
// engine. A replicated host (package raftkv) sends them to a replica whose
// log is behind the leader's truncated log.
//
// # Stream format (version 1)
//
// Integers are little-endian; a uvarint is encoding/binary's. The stream is
// a sequence of frames:
//
//	frame   = length u32 | checksum u64 | payload (length bytes)
//
// where checksum is xxh3-64 of the payload. The first frame is the header,
// the last the trailer, and every frame between holds whole records:
//
//	header  = "KVBUFSNP" | version u32 (1) | op u64
//	record  = 0x01 keyspace: uvarint n | name (n bytes)
//	        | 0x02 pair:     uvarint n | key | uvarint m | value   (in the last keyspace)
//	        | 0x03 bitslice: uvarint n | name | uvarint length in bits
//	        | 0x04 words:    uvarint first word index | uvarint k | k words u64 (in the last bitslice)
//	trailer = 0xff | uvarint keyspaces | uvarint pairs | uvarint bitslices | uvarint set bits | digest (16 bytes)
//
// Keyspaces come first, in increasing name order, each followed by its pairs
// in increasing key order; then bitslices in increasing name order, each
// followed by its nonzero words in increasing index order (bit i of a
// bitslice is bit i%64 of word i/64). The trailer's counts and digest (see
// Snapshot.Digest) cover the whole content; nothing follows it. Frames are
// at most exportFrameSize bytes unless one record is larger.
const (
	streamMagic   = "KVBUFSNP"
	streamVersion = 1

	frameHeaderSize = 12
	exportFrameSize = 64 << 10
	maxWordsRecord  = 4096 // words per words record

	recKeyspace = 0x01
	recPair     = 0x02
	recBitslice = 0x03
	recWords    = 0x04
	recTrailer  = 0xff
)

// frameWriter buffers records into frames.
type frameWriter struct {
	w   io.Writer
	buf []byte
	n   int64 // bytes written
}

func (fw *frameWriter) frame() error {
	var hdr [frameHeaderSize]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(fw.buf)))
	binary.LittleEndian.PutUint64(hdr[4:12], xxh3.Hash(fw.buf))
	if _, err := fw.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := fw.w.Write(fw.buf); err != nil {
		return err
	}
	fw.n += int64(frameHeaderSize + len(fw.buf))
	fw.buf = fw.buf[:0]
	return nil
}

// endRecord ends a record: a full frame is written out.
func (fw *frameWriter) endRecord() error {
	if len(fw.buf) >= exportFrameSize {
		return fw.frame()
	}
	return nil
}

func (fw *frameWriter) bytes(p []byte) {
	fw.buf = binary.AppendUvarint(fw.buf, uint64(len(p)))
	fw.buf = append(fw.buf, p...)
}

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
// Errors: ErrClosed if the snapshot or the engine is closed, ctx.Err(),
// and w's errors, as they happen (w has then received part of a stream,
// which Install refuses).
func (s *Snapshot) Export(ctx context.Context, w io.Writer, op uint64) (int64, error) {
	fw := &frameWriter{w: w}
	d := digest.New()
	fw.buf = append(fw.buf, streamMagic...)
	fw.buf = binary.LittleEndian.AppendUint32(fw.buf, streamVersion)
	fw.buf = binary.LittleEndian.AppendUint64(fw.buf, op)
	if err := fw.frame(); err != nil {
		return fw.n, kverr.Errorf("export: %w", err)
	}
	if err := s.exportKVs(ctx, fw, d); err != nil {
		return fw.n, err
	}
	if err := s.exportBits(ctx, fw, d); err != nil {
		return fw.n, err
	}
	if len(fw.buf) > 0 {
		if err := fw.frame(); err != nil {
			return fw.n, kverr.Errorf("export: %w", err)
		}
	}
	sum, err := d.Sum()
	if err != nil {
		return fw.n, kverr.Errorf("export: %w", err) // a bug: the snapshot read out of order
	}
	fw.buf = append(fw.buf, recTrailer)
	ks, pairs, bs, ones := d.Counts()
	for _, n := range [...]uint64{ks, pairs, bs, ones} {
		fw.buf = binary.AppendUvarint(fw.buf, n)
	}
	fw.buf = append(fw.buf, sum[:]...)
	if err := fw.frame(); err != nil {
		return fw.n, kverr.Errorf("export: %w", err)
	}
	return fw.n, nil
}

// names returns the sorted keys of m.
func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (s *Snapshot) exportKVs(ctx context.Context, fw *frameWriter, d *digest.Hasher) error {
	return s.eachKV(ctx, d, func(name string) error {
		fw.buf = append(fw.buf, recKeyspace)
		fw.bytes([]byte(name))
		return fw.endRecord()
	}, func(k, v []byte) error {
		fw.buf = append(fw.buf, recPair)
		fw.bytes(k)
		fw.bytes(v)
		return fw.endRecord()
	})
}

// eachKV feeds d every keyspace of the snapshot and its pairs, in order,
// calling ks and pair (if not nil) for each as well.
func (s *Snapshot) eachKV(ctx context.Context, d *digest.Hasher, ks func(string) error, pair func(k, v []byte) error) error {
	for _, name := range names(s.kvs) {
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

func (s *Snapshot) exportBits(ctx context.Context, fw *frameWriter, d *digest.Hasher) error {
	var run []uint64 // the words of the run being built
	var first uint64 // the index of run[0]
	flushRun := func() error {
		if len(run) == 0 {
			return nil
		}
		fw.buf = append(fw.buf, recWords)
		fw.buf = binary.AppendUvarint(fw.buf, first)
		fw.buf = binary.AppendUvarint(fw.buf, uint64(len(run)))
		for _, w := range run {
			fw.buf = binary.LittleEndian.AppendUint64(fw.buf, w)
		}
		run = run[:0]
		return fw.endRecord()
	}
	return s.eachBits(ctx, d, func(name string, n uint64) error {
		fw.buf = append(fw.buf, recBitslice)
		fw.bytes([]byte(name))
		fw.buf = binary.AppendUvarint(fw.buf, n)
		return fw.endRecord()
	}, func(w, bits uint64) error {
		if len(run) > 0 && (w != first+uint64(len(run)) || len(run) == maxWordsRecord) {
			if err := flushRun(); err != nil {
				return err
			}
		}
		if len(run) == 0 {
			first = w
		}
		run = append(run, bits)
		return nil
	}, flushRun)
}

// eachBits feeds d every bitslice of the snapshot and its nonzero words,
// in order, calling bs, word and end (if not nil) for each bitslice, word
// and at the end of each bitslice as well.
func (s *Snapshot) eachBits(ctx context.Context, d *digest.Hasher, bs func(name string, n uint64) error, word func(w, bits uint64) error, end func() error) error {
	for _, name := range names(s.bits) {
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

// badStream returns an error matching ErrBadStream and ErrCorrupt.
func badStream(format string, args ...any) error {
	return kverr.Errorf(format+": %w", append(args, ErrBadStream)...)
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
// Errors (dir is then removed, with everything Install wrote): errors
// matching ErrBadStream and ErrCorrupt for a corrupt, truncated
// (io.ErrUnexpectedEOF too) or inconsistent stream; the engine's write
// errors (ErrBadName, ErrKeyTooLarge, ErrValueTooLarge, ErrOutOfRange for
// content opts cannot hold); r's read errors; ctx.Err().
func Install(ctx context.Context, dir string, r io.Reader, opts *Options) (op uint64, err error) {
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
	in := &installer{db: db, r: bufio.NewReaderSize(r, 64<<10), d: digest.New()}
	in.maxFrame = db.opts.MaxKeySize + db.opts.MaxValueSize + 2*exportFrameSize
	op, err = in.run(ctx)
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

// installer parses a stream and writes it into a fresh engine.
type installer struct {
	db       *DB
	r        *bufio.Reader
	d        *digest.Hasher
	maxFrame int
	frame    []byte
	frames   int

	batch   *Batch
	kv      *KV   // the open keyspace
	bits    *Bits // the open bitslice
	bitsN   uint64
	sawBits bool // a bitslice record was read: no more keyspaces
	// Order checks (the digest checks them too, but a record must be
	// refused before it is written).
	lastName string
	haveKey  bool
	lastKey  []byte
	nextWord uint64
	hiBit    uint64 // one past the highest set bit of the open bitslice
}

// installBatchBytes bounds the data of one batch written while installing.
const installBatchBytes = 1 << 20

func (in *installer) run(ctx context.Context) (uint64, error) {
	hdr, err := in.readFrame()
	if err != nil {
		return 0, err
	}
	if len(hdr) != 20 || string(hdr[:8]) != streamMagic {
		return 0, badStream("not a snapshot stream (header of %d bytes)", len(hdr))
	}
	if v := binary.LittleEndian.Uint32(hdr[8:12]); v != streamVersion {
		return 0, badStream("format version %d, this engine reads %d", v, streamVersion)
	}
	op := binary.LittleEndian.Uint64(hdr[12:20])
	in.batch = in.db.NewBatch()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		p, err := in.readFrame()
		if err != nil {
			return 0, err
		}
		if len(p) > 0 && p[0] == recTrailer {
			if err := in.trailer(ctx, p[1:]); err != nil {
				return 0, err
			}
			return op, nil
		}
		for len(p) > 0 {
			if p, err = in.record(ctx, p); err != nil {
				return 0, err
			}
		}
	}
}

// readFrame reads and checks one frame, returning its payload (valid until
// the next call).
func (in *installer) readFrame() ([]byte, error) {
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(in.r, hdr[:]); err != nil {
		return nil, in.readErr(err, "frame header")
	}
	n := binary.LittleEndian.Uint32(hdr[0:4])
	if int64(n) > int64(in.maxFrame) {
		return nil, badStream("frame %d of %d bytes, larger than this engine's largest record allows (%d)", in.frames, n, in.maxFrame)
	}
	if cap(in.frame) < int(n) {
		in.frame = make([]byte, n)
	}
	p := in.frame[:n]
	if _, err := io.ReadFull(in.r, p); err != nil {
		return nil, in.readErr(err, "frame payload")
	}
	if xxh3.Hash(p) != binary.LittleEndian.Uint64(hdr[4:12]) {
		return nil, badStream("frame %d: checksum mismatch", in.frames)
	}
	in.frames++
	return p, nil
}

// readErr maps a read error: the end of the stream before the trailer is a
// truncated stream.
func (in *installer) readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return kverr.Errorf("%w: %w", badStream("truncated in the %s of frame %d", what, in.frames), io.ErrUnexpectedEOF)
	}
	return kverr.Errorf("read frame %d: %w", in.frames, err)
}

// uvarint decodes a uvarint from p.
func uvarint(p []byte, what string) (uint64, []byte, error) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, nil, badStream("bad %s", what)
	}
	return v, p[n:], nil
}

// lenBytes decodes a uvarint length and that many bytes.
func lenBytes(p []byte, what string) ([]byte, []byte, error) {
	n, p, err := uvarint(p, what+" length")
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(p)) {
		return nil, nil, badStream("%s of %d bytes past the end of its frame", what, n)
	}
	return p[:n:n], p[n:], nil
}

// record decodes and applies the record at the start of p, returning the
// rest.
func (in *installer) record(ctx context.Context, p []byte) ([]byte, error) {
	tag := p[0]
	p = p[1:]
	switch tag {
	case recKeyspace:
		name, rest, err := lenBytes(p, "keyspace name")
		if err != nil {
			return nil, err
		}
		if err := in.endBits(ctx); err != nil {
			return nil, err
		}
		if in.sawBits || (in.kv != nil && string(name) <= in.lastName) {
			return nil, badStream("keyspace %q out of order", name)
		}
		kv, err := in.db.KV(string(name))
		if err != nil {
			return nil, err
		}
		in.d.Keyspace(string(name))
		in.kv, in.lastName, in.haveKey = kv, string(name), false
		return rest, nil
	case recPair:
		key, rest, err := lenBytes(p, "key")
		if err != nil {
			return nil, err
		}
		val, rest, err := lenBytes(rest, "value")
		if err != nil {
			return nil, err
		}
		if in.kv == nil || in.bits != nil {
			return nil, badStream("pair %q outside a keyspace", key)
		}
		if in.haveKey && string(key) <= string(in.lastKey) {
			return nil, badStream("key %q after %q in keyspace %q", key, in.lastKey, in.lastName)
		}
		in.haveKey, in.lastKey = true, append(in.lastKey[:0], key...)
		in.d.Pair(key, val)
		in.batch.Put(in.kv, key, val)
		return rest, in.maybeApply(ctx)
	case recBitslice:
		name, rest, err := lenBytes(p, "bitslice name")
		if err != nil {
			return nil, err
		}
		n, rest, err := uvarint(rest, "bitslice length")
		if err != nil {
			return nil, err
		}
		if err := in.endBits(ctx); err != nil {
			return nil, err
		}
		if in.sawBits && string(name) <= in.lastName {
			return nil, badStream("bitslice %q out of order", name)
		}
		b, err := in.db.Bits(string(name))
		if err != nil {
			return nil, err
		}
		in.d.Bitslice(string(name))
		in.bits, in.bitsN, in.lastName, in.nextWord, in.hiBit = b, n, string(name), 0, 0
		in.sawBits, in.kv = true, nil
		return rest, nil
	case recWords:
		first, rest, err := uvarint(p, "word index")
		if err != nil {
			return nil, err
		}
		k, rest, err := uvarint(rest, "word count")
		if err != nil {
			return nil, err
		}
		switch {
		case in.bits == nil:
			return nil, badStream("words outside a bitslice")
		case k > uint64(len(rest))/8:
			return nil, badStream("%d words past the end of their frame", k)
		case first < in.nextWord:
			return nil, badStream("word %d out of order in bitslice %q", first, in.lastName)
		case first > in.bitsN/64 || k > in.bitsN/64+1-first:
			return nil, badStream("words %d+%d past the length (%d bits) of bitslice %q", first, k, in.bitsN, in.lastName)
		}
		for j := range k {
			bits := binary.LittleEndian.Uint64(rest[8*j:])
			if bits == 0 {
				continue
			}
			w := first + j
			in.d.Word(w, bits)
			if err := in.setWord(w, bits); err != nil {
				return nil, err
			}
		}
		in.nextWord = first + k
		return rest[8*k:], in.maybeApply(ctx)
	}
	return nil, badStream("unknown record type %#x in frame %d", tag, in.frames-1)
}

// setWord adds word w's set bits to the batch: runs of ones as ranges.
func (in *installer) setWord(w, bits uint64) error {
	for bits != 0 {
		lo := uint64(mbits.TrailingZeros64(bits))
		run := uint64(mbits.TrailingZeros64(^(bits >> lo)))
		i := w*64 + lo
		if i+run > in.bitsN {
			return badStream("bit %d past the length (%d bits) of bitslice %q", i+run-1, in.bitsN, in.lastName)
		}
		if run == 1 {
			in.batch.Set(in.bits, i, true)
		} else {
			in.batch.SetRange(in.bits, i, i+run, true)
		}
		in.hiBit = i + run
		if lo+run == 64 {
			break
		}
		bits &^= (1<<run - 1) << lo
	}
	return nil
}

// endBits finishes the open bitslice: its length is set by clearing its
// last bit if no set bit reaches it.
func (in *installer) endBits(ctx context.Context) error {
	if in.bits == nil {
		return nil
	}
	if in.bitsN > in.hiBit {
		in.batch.Set(in.bits, in.bitsN-1, false)
	}
	in.bits = nil
	return in.apply(ctx)
}

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

func (in *installer) trailer(ctx context.Context, p []byte) error {
	if err := in.endBits(ctx); err != nil {
		return err
	}
	if err := in.apply(ctx); err != nil {
		return err
	}
	var counts [4]uint64
	for i := range counts {
		var err error
		if counts[i], p, err = uvarint(p, "trailer count"); err != nil {
			return err
		}
	}
	if len(p) != 16 {
		return badStream("trailer digest of %d bytes", len(p))
	}
	ks, pairs, bs, ones := in.d.Counts()
	if got := [4]uint64{ks, pairs, bs, ones}; got != counts {
		return badStream("content has %d keyspaces, %d pairs, %d bitslices, %d set bits; the trailer says %v", ks, pairs, bs, ones, counts)
	}
	sum, err := in.d.Sum()
	if err != nil {
		return badStream("%v", err)
	}
	if string(sum[:]) != string(p) {
		return badStream("content digest %s, the trailer says %x", sum, p)
	}
	if _, err := in.r.ReadByte(); err != io.EOF {
		if err == nil {
			return badStream("bytes after the trailer")
		}
		return kverr.Errorf("read after the trailer: %w", err)
	}
	return nil
}
