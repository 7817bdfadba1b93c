package snapstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	mbits "math/bits"

	"github.com/zeebo/xxh3"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Sink receives a stream's content from Decode, in the stream's order,
// each record checked (order, bounds) before it is passed on.
type Sink interface {
	// Keyspace starts keyspace name (after the previous bitslice, if any,
	// was ended by EndBitslice).
	Keyspace(ctx context.Context, name string) error
	// Pair adds a pair to the keyspace started last.
	Pair(ctx context.Context, key, value []byte) error
	// Bitslice starts bitslice name of n bits.
	Bitslice(ctx context.Context, name string, n uint64) error
	// SetBits sets bits [i, i+run) of the bitslice started last.
	SetBits(ctx context.Context, i, run uint64) error
	// EndBitslice ends the bitslice started last: n is its length, hi one
	// past its highest set bit (0 if none).
	EndBitslice(ctx context.Context, n, hi uint64) error
	// End is called once after the last record, before the trailer is
	// checked.
	End(ctx context.Context) error
}

// decoder parses a stream for Decode.
type decoder struct {
	s        Sink
	r        *bufio.Reader
	d        *digest.Hasher
	maxFrame int
	frame    []byte
	frames   int

	inKV    bool // a keyspace is open
	inBits  bool // a bitslice is open
	bitsN   uint64
	sawBits bool // a bitslice record was read: no more keyspaces
	// Order checks (the digest checks them too, but a record must be
	// refused before it is passed on).
	lastName string
	haveKey  bool
	lastKey  []byte
	nextWord uint64
	hiBit    uint64 // one past the highest set bit of the open bitslice
}

// Decode reads a stream from r, passing its content to s, and returns the
// stream's op. A frame larger than maxFrame is refused. Errors: errors
// matching ErrBadStream and ErrCorrupt for a corrupt, truncated
// (io.ErrUnexpectedEOF too) or inconsistent stream; s's errors; r's read
// errors; ctx.Err().
func Decode(ctx context.Context, r io.Reader, maxFrame int, s Sink) (uint64, error) {
	in := &decoder{s: s, r: bufio.NewReaderSize(r, 64<<10), d: digest.New(), maxFrame: maxFrame}
	hdr, err := in.readFrame()
	if err != nil {
		return 0, err
	}
	if len(hdr) != 20 || string(hdr[:8]) != Magic {
		return 0, badStream("not a snapshot stream (header of %d bytes)", len(hdr))
	}
	if v := binary.LittleEndian.Uint32(hdr[8:12]); v != Version {
		return 0, badStream("format version %d, this engine reads %d", v, Version)
	}
	op := binary.LittleEndian.Uint64(hdr[12:20])
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		p, err := in.readFrame()
		if err != nil {
			return 0, err
		}
		if len(p) > 0 && p[0] == RecTrailer {
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
func (in *decoder) readFrame() ([]byte, error) {
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
func (in *decoder) readErr(err error, what string) error {
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

// record decodes and passes on the record at the start of p, returning the
// rest.
func (in *decoder) record(ctx context.Context, p []byte) ([]byte, error) {
	tag := p[0]
	p = p[1:]
	switch tag {
	case RecKeyspace:
		name, rest, err := lenBytes(p, "keyspace name")
		if err != nil {
			return nil, err
		}
		if err := in.endBits(ctx); err != nil {
			return nil, err
		}
		if in.sawBits || (in.inKV && string(name) <= in.lastName) {
			return nil, badStream("keyspace %q out of order", name)
		}
		if err := in.s.Keyspace(ctx, string(name)); err != nil {
			return nil, err
		}
		in.d.Keyspace(string(name))
		in.inKV, in.lastName, in.haveKey = true, string(name), false
		return rest, nil
	case RecPair:
		key, rest, err := lenBytes(p, "key")
		if err != nil {
			return nil, err
		}
		val, rest, err := lenBytes(rest, "value")
		if err != nil {
			return nil, err
		}
		if !in.inKV || in.inBits {
			return nil, badStream("pair %q outside a keyspace", key)
		}
		if in.haveKey && string(key) <= string(in.lastKey) {
			return nil, badStream("key %q after %q in keyspace %q", key, in.lastKey, in.lastName)
		}
		in.haveKey, in.lastKey = true, append(in.lastKey[:0], key...)
		in.d.Pair(key, val)
		return rest, in.s.Pair(ctx, key, val)
	case RecBitslice:
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
		if err := in.s.Bitslice(ctx, string(name), n); err != nil {
			return nil, err
		}
		in.d.Bitslice(string(name))
		in.inBits, in.bitsN, in.lastName, in.nextWord, in.hiBit = true, n, string(name), 0, 0
		in.sawBits, in.inKV = true, false
		return rest, nil
	case RecWords:
		first, rest, err := uvarint(p, "word index")
		if err != nil {
			return nil, err
		}
		k, rest, err := uvarint(rest, "word count")
		if err != nil {
			return nil, err
		}
		switch {
		case !in.inBits:
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
			if err := in.setWord(ctx, w, bits); err != nil {
				return nil, err
			}
		}
		in.nextWord = first + k
		return rest[8*k:], nil
	}
	return nil, badStream("unknown record type %#x in frame %d", tag, in.frames-1)
}

// setWord passes on word w's set bits: runs of ones as ranges.
func (in *decoder) setWord(ctx context.Context, w, bits uint64) error {
	for bits != 0 {
		lo := uint64(mbits.TrailingZeros64(bits))
		run := uint64(mbits.TrailingZeros64(^(bits >> lo)))
		i := w*64 + lo
		if i+run > in.bitsN {
			return badStream("bit %d past the length (%d bits) of bitslice %q", i+run-1, in.bitsN, in.lastName)
		}
		if err := in.s.SetBits(ctx, i, run); err != nil {
			return err
		}
		in.hiBit = i + run
		if lo+run == 64 {
			break
		}
		bits &^= (1<<run - 1) << lo
	}
	return nil
}

// endBits ends the open bitslice, if any.
func (in *decoder) endBits(ctx context.Context) error {
	if !in.inBits {
		return nil
	}
	in.inBits = false
	return in.s.EndBitslice(ctx, in.bitsN, in.hiBit)
}

func (in *decoder) trailer(ctx context.Context, p []byte) error {
	if err := in.endBits(ctx); err != nil {
		return err
	}
	if err := in.s.End(ctx); err != nil {
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
