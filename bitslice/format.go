package bitslice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

const (
	// Version is the on-disk format version this package writes. It also
	// reads version 1 (no owner, no generation), and rewrites such a file's
	// header as version 2 at its first Sync or Grow.
	Version = 2
	// MaxBits is the largest length Create and Grow accept and Open
	// believes: 2^40 bits (128 GiB of data). Anything larger in a header is
	// treated as corruption rather than an invitation to map it.
	MaxBits = 1 << 40

	// DataOffset is where the data words start: one page, holding the two
	// header slots.
	DataOffset = 4096

	slotSize   = 64
	slotStride = 2048 // slot i lives at i*slotStride
	crcOffset  = 60
)

var (
	magic    = [8]byte{'K', 'V', 'B', 'U', 'F', 'B', 'I', 'T'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// header is the content of one header slot.
type header struct {
	seq       uint64
	nbits     uint64
	watermark uint64
	owner     uint64 // version 2: the engine the file belongs to (0: none)
	gen       uint64 // version 2: the owner's write generation of the last update
	version   uint32 // as read; encodeSlot writes it, or Version if 0
}

// slotFor is the slot a header with sequence number seq is written to.
func slotFor(seq uint64) int { return int((seq - 1) & 1) }

// words is the number of data words holding nbits bits.
func words(nbits uint64) uint64 { return (nbits + 63) / 64 }

// dataSize is the minimum file size for nbits bits.
func dataSize(nbits uint64) int64 { return DataOffset + int64(words(nbits))*8 }

func encodeSlot(h header) [slotSize]byte {
	var b [slotSize]byte
	copy(b[0:8], magic[:])
	v := h.version
	if v == 0 {
		v = Version
	}
	binary.LittleEndian.PutUint32(b[8:12], v)
	binary.LittleEndian.PutUint32(b[12:16], DataOffset)
	binary.LittleEndian.PutUint64(b[16:24], h.seq)
	binary.LittleEndian.PutUint64(b[24:32], h.nbits)
	binary.LittleEndian.PutUint64(b[32:40], h.watermark)
	binary.LittleEndian.PutUint64(b[40:48], h.owner)
	binary.LittleEndian.PutUint64(b[48:56], h.gen)
	binary.LittleEndian.PutUint32(b[crcOffset:], crc32.Checksum(b[:crcOffset], crcTable))
	return b
}

// errVersion marks a slot whose checksum is good but whose version is not
// ours: that fails the whole file instead of falling back to the other slot.
var errVersion = errors.New("unsupported format version")

// decodeSlot validates slot idx (b is exactly slotSize bytes). The error is a
// short reason, not yet wrapped in kvbuf.ErrCorruptBits.
func decodeSlot(b []byte, idx int) (header, error) {
	allZero := true
	for _, c := range b {
		if c != 0 {
			allZero = false
			break
		}
	}
	if allZero {
		return header{}, errors.New("never written")
	}
	if [8]byte(b[0:8]) != magic {
		return header{}, fmt.Errorf("bad magic %q (not a kvbuf bitslice file)", b[0:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[crcOffset:]), crc32.Checksum(b[:crcOffset], crcTable); got != want {
		return header{}, fmt.Errorf("bad checksum %#08x, computed %#08x", got, want)
	}
	v := binary.LittleEndian.Uint32(b[8:12])
	if v != 1 && v != Version {
		return header{}, kverr.Errorf("%w %d (this build reads versions 1 and %d)", errVersion, v, Version)
	}
	if off := binary.LittleEndian.Uint32(b[12:16]); off != DataOffset {
		return header{}, fmt.Errorf("data offset %d, want %d", off, DataOffset)
	}
	reserved := 56 // version 1 has no owner and generation: 40:60 reserved
	if v == 1 {
		reserved = 40
	}
	for _, c := range b[reserved:crcOffset] {
		if c != 0 {
			return header{}, errors.New("reserved bytes are not zero")
		}
	}
	h := header{
		seq:       binary.LittleEndian.Uint64(b[16:24]),
		nbits:     binary.LittleEndian.Uint64(b[24:32]),
		watermark: binary.LittleEndian.Uint64(b[32:40]),
		version:   v,
	}
	if v >= 2 {
		h.owner = binary.LittleEndian.Uint64(b[40:48])
		h.gen = binary.LittleEndian.Uint64(b[48:56])
	}
	if h.seq == 0 || slotFor(h.seq) != idx {
		return header{}, fmt.Errorf("sequence number %d does not belong in slot %d", h.seq, idx)
	}
	if h.nbits > MaxBits {
		return header{}, fmt.Errorf("length %d bits exceeds the maximum %d", h.nbits, uint64(MaxBits))
	}
	return h, nil
}

// parsed is the outcome of parseHeader.
type parsed struct {
	header
	slot  int // slot the header came from
	valid int // how many slots are valid (1 or 2)
}

// parseHeader picks the newest valid slot of the header area buf and checks
// it against the file size. Errors wrap kvbuf.ErrCorruptBits.
func parseHeader(buf []byte, fileSize int64) (parsed, error) {
	if fileSize < DataOffset || len(buf) < DataOffset {
		hint := ""
		if len(buf) >= len(magic) && [8]byte(buf[:8]) != magic {
			hint = fmt.Sprintf(" and starts %q (not a kvbuf bitslice file)", buf[:8])
		}
		return parsed{}, kverr.Errorf("file is %d bytes, shorter than the %d-byte header%s: %w", fileSize, DataOffset, hint, kverr.ErrCorruptBits)
	}
	var (
		p       parsed
		found   bool
		reasons [2]error
	)
	for i := range 2 {
		h, err := decodeSlot(buf[i*slotStride:i*slotStride+slotSize], i)
		if errors.Is(err, errVersion) {
			return parsed{}, kverr.Errorf("header slot %d: %v: %w", i, err, kverr.ErrCorruptBits)
		}
		if err != nil {
			reasons[i] = err
			continue
		}
		p.valid++
		if !found || h.seq > p.seq {
			p.header, p.slot, found = h, i, true
		}
	}
	if !found {
		return parsed{}, kverr.Errorf("no valid header slot (slot 0: %v; slot 1: %v): %w", reasons[0], reasons[1], kverr.ErrCorruptBits)
	}
	if need := dataSize(p.nbits); fileSize < need {
		return parsed{}, kverr.Errorf("truncated: file is %d bytes, header (seq %d) says %d bits, which needs %d bytes: %w",
			fileSize, p.seq, p.nbits, need, kverr.ErrCorruptBits)
	}
	if (fileSize-DataOffset)%8 != 0 {
		return parsed{}, kverr.Errorf("data area is %d bytes, not a whole number of 8-byte words: %w", fileSize-DataOffset, kverr.ErrCorruptBits)
	}
	return p, nil
}
