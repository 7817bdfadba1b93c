// Package snapstream is the format of kvbuf's snapshot streams: a Writer
// encodes one (kvbuf's Snapshot.Export), Decode checks one and hands its
// content to a Sink (kvbuf's Install). The engine's side (reading a
// snapshot, writing into a new engine) stays in package kvbuf.
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
// bitslice is bit i%64 of word i/64). The trailer's counts and digest
// (package digest, the one Snapshot.Digest returns) cover the whole
// content; nothing follows it. Frames are at most FrameSize bytes unless
// one record is larger.
package snapstream

import (
	"encoding/binary"
	"io"

	"github.com/zeebo/xxh3"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

const (
	// Magic starts the header frame.
	Magic = "KVBUFSNP"
	// Version is the format version this package writes and reads.
	Version = 1
	// FrameSize is the size a Writer fills a frame to before it writes it.
	FrameSize = 64 << 10
	// MaxWordsRecord bounds the words of one words record.
	MaxWordsRecord = 4096

	frameHeaderSize = 12

	// RecKeyspace tags a keyspace record (its name); the pairs after it
	// are its own.
	RecKeyspace = 0x01
	// RecPair tags a key and its value, in the last keyspace.
	RecPair = 0x02
	// RecBitslice tags a bitslice record (its name and length in bits);
	// the words after it are its own.
	RecBitslice = 0x03
	// RecWords tags a run of nonzero words, in the last bitslice.
	RecWords = 0x04
	// RecTrailer tags the trailer: the counts and the digest.
	RecTrailer = 0xff
)

// Writer encodes a stream into an io.Writer. Records must come in the
// stream's order; the caller feeds the same content to the digest it
// passes to Close (which checks the order).
type Writer struct {
	w   io.Writer
	buf []byte
	n   int64 // bytes written

	run   []uint64 // the words of the words record being built
	first uint64   // the index of run[0]
}

// NewWriter writes the header of a stream of op to w.
func NewWriter(w io.Writer, op uint64) (*Writer, error) {
	sw := &Writer{w: w}
	sw.buf = append(sw.buf, Magic...)
	sw.buf = binary.LittleEndian.AppendUint32(sw.buf, Version)
	sw.buf = binary.LittleEndian.AppendUint64(sw.buf, op)
	return sw, sw.frame()
}

// Written returns the number of bytes written to the io.Writer so far.
func (sw *Writer) Written() int64 { return sw.n }

func (sw *Writer) frame() error {
	var hdr [frameHeaderSize]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(sw.buf)))
	binary.LittleEndian.PutUint64(hdr[4:12], xxh3.Hash(sw.buf))
	if _, err := sw.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := sw.w.Write(sw.buf); err != nil {
		return err
	}
	sw.n += int64(frameHeaderSize + len(sw.buf))
	sw.buf = sw.buf[:0]
	return nil
}

// endRecord ends a record: a full frame is written out.
func (sw *Writer) endRecord() error {
	if len(sw.buf) >= FrameSize {
		return sw.frame()
	}
	return nil
}

func (sw *Writer) bytes(p []byte) {
	sw.buf = binary.AppendUvarint(sw.buf, uint64(len(p)))
	sw.buf = append(sw.buf, p...)
}

// Keyspace starts keyspace name.
func (sw *Writer) Keyspace(name string) error {
	sw.buf = append(sw.buf, RecKeyspace)
	sw.bytes([]byte(name))
	return sw.endRecord()
}

// Pair adds a pair to the keyspace started last.
func (sw *Writer) Pair(k, v []byte) error {
	sw.buf = append(sw.buf, RecPair)
	sw.bytes(k)
	sw.bytes(v)
	return sw.endRecord()
}

// Bitslice starts bitslice name of n bits (the previous one's words are
// written first).
func (sw *Writer) Bitslice(name string, n uint64) error {
	if err := sw.flushRun(); err != nil {
		return err
	}
	sw.buf = append(sw.buf, RecBitslice)
	sw.bytes([]byte(name))
	sw.buf = binary.AppendUvarint(sw.buf, n)
	return sw.endRecord()
}

// Word adds nonzero word w (its bits) to the bitslice started last.
func (sw *Writer) Word(w, bits uint64) error {
	if len(sw.run) > 0 && (w != sw.first+uint64(len(sw.run)) || len(sw.run) == MaxWordsRecord) {
		if err := sw.flushRun(); err != nil {
			return err
		}
	}
	if len(sw.run) == 0 {
		sw.first = w
	}
	sw.run = append(sw.run, bits)
	return nil
}

// flushRun writes the words record being built, if any.
func (sw *Writer) flushRun() error {
	if len(sw.run) == 0 {
		return nil
	}
	sw.buf = append(sw.buf, RecWords)
	sw.buf = binary.AppendUvarint(sw.buf, sw.first)
	sw.buf = binary.AppendUvarint(sw.buf, uint64(len(sw.run)))
	for _, w := range sw.run {
		sw.buf = binary.LittleEndian.AppendUint64(sw.buf, w)
	}
	sw.run = sw.run[:0]
	return sw.endRecord()
}

// Close writes the last records and the trailer, with d's counts and sum:
// d was fed the stream's content.
func (sw *Writer) Close(d *digest.Hasher) error {
	if err := sw.flushRun(); err != nil {
		return err
	}
	if len(sw.buf) > 0 {
		if err := sw.frame(); err != nil {
			return err
		}
	}
	sum, err := d.Sum()
	if err != nil {
		return err // a bug: records out of order
	}
	sw.buf = append(sw.buf, RecTrailer)
	ks, pairs, bs, ones := d.Counts()
	for _, n := range [...]uint64{ks, pairs, bs, ones} {
		sw.buf = binary.AppendUvarint(sw.buf, n)
	}
	sw.buf = append(sw.buf, sum[:]...)
	return sw.frame()
}

// badStream returns an error matching ErrBadStream and ErrCorrupt.
func badStream(format string, args ...any) error {
	return kverr.Errorf(format+": %w", append(args, kverr.ErrBadStream)...)
}
