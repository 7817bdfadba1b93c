package enginedir

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"golang.org/x/sys/unix"
)

// ReceiptName is the engine directory's receipt file: the watermark of a
// flush that wrote bitslices alone, made durable by one write and one
// fdatasync instead of a store commit (see Receipt).
const ReceiptName = "RECEIPT"

// The receipt file holds two slots of ReceiptSlotSize bytes, used in turn
// (slot seq%2): a write that a power cut tears damages only the slot being
// written, whose checksum then fails, and the other slot, the previous
// receipt, stays in force.
const (
	// ReceiptSlotSize bounds a receipt: its encoded bitslice catalog may
	// take ReceiptSlotSize - 44 bytes (a larger one goes to the store).
	ReceiptSlotSize = 4096
	receiptSlots    = 2
	receiptMagic    = 0x5262766b // "kvbR" little-endian
	// magic, seq, engine id, watermark, highest op, catalog length; the
	// catalog; crc32c of all that.
	receiptFixed = 4 + 8 + 8 + 8 + 8 + 4
)

var receiptCRC = crc32.MakeTable(crc32.Castagnoli)

// ReceiptSlot is one receipt: Watermark and Highest (the highest op seen)
// are durable for the engine Engine as of write number Seq, and every
// bitslice in Bits has a header of at least its generation (lengths are
// the store catalog's, which a receipt never changes).
type ReceiptSlot struct {
	Seq       uint64
	Engine    uint64
	Watermark uint64
	Highest   uint64
	Bits      BitsCatalog
}

// ReceiptFits reports whether a receipt with the encoded catalog cat fits
// a slot.
func ReceiptFits(cat []byte) bool { return receiptFixed+len(cat)+4 <= ReceiptSlotSize }

func (s ReceiptSlot) encode(cat []byte) []byte {
	b := make([]byte, receiptFixed, receiptFixed+len(cat)+4)
	binary.LittleEndian.PutUint32(b[0:], receiptMagic)
	binary.LittleEndian.PutUint64(b[4:], s.Seq)
	binary.LittleEndian.PutUint64(b[12:], s.Engine)
	binary.LittleEndian.PutUint64(b[20:], s.Watermark)
	binary.LittleEndian.PutUint64(b[28:], s.Highest)
	binary.LittleEndian.PutUint32(b[36:], uint32(len(cat)))
	b = append(b, cat...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, receiptCRC))
}

func decodeReceiptSlot(b []byte) (ReceiptSlot, bool) {
	if len(b) < receiptFixed+4 || binary.LittleEndian.Uint32(b[0:]) != receiptMagic {
		return ReceiptSlot{}, false
	}
	n := int(binary.LittleEndian.Uint32(b[36:]))
	if n > len(b)-receiptFixed-4 {
		return ReceiptSlot{}, false
	}
	end := receiptFixed + n
	if binary.LittleEndian.Uint32(b[end:]) != crc32.Checksum(b[:end], receiptCRC) {
		return ReceiptSlot{}, false
	}
	cat, err := ParseBitsCatalog(b[receiptFixed:end])
	if err != nil {
		return ReceiptSlot{}, false
	}
	return ReceiptSlot{
		Seq:       binary.LittleEndian.Uint64(b[4:]),
		Engine:    binary.LittleEndian.Uint64(b[12:]),
		Watermark: binary.LittleEndian.Uint64(b[20:]),
		Highest:   binary.LittleEndian.Uint64(b[28:]),
		Bits:      cat,
	}, true
}

// ReadReceipt returns the newest valid slot of the receipt file in the
// engine directory dir written for engine id, and false if there is none
// (no file, both slots torn or never written, or another engine's: a copy
// of the directory made by other means than Checkpoint).
func ReadReceipt(dir string, engine uint64) (ReceiptSlot, bool, error) {
	path := filepath.Join(dir, ReceiptName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ReceiptSlot{}, false, nil
	}
	if err != nil {
		return ReceiptSlot{}, false, kverr.Errorf("read %s: %w", path, err)
	}
	var best ReceiptSlot
	found := false
	for i := range receiptSlots {
		off := i * ReceiptSlotSize
		if off >= len(b) {
			break
		}
		s, ok := decodeReceiptSlot(b[off:min(len(b), off+ReceiptSlotSize)])
		if ok && s.Engine == engine && (!found || s.Seq > best.Seq) {
			best, found = s, true
		}
	}
	return best, found, nil
}

// Receipt writes the receipt file. Only the flush writes it, one write at
// a time (the caller serialises Write).
type Receipt struct {
	dir  string
	f    *os.File // nil until the first Write
	next ReceiptSlot
}

// NewReceipt returns the receipt writer of the engine directory dir,
// whose next write follows last (the newest valid slot ReadReceipt
// returned, or the zero slot).
func NewReceipt(dir string, last ReceiptSlot) *Receipt {
	return &Receipt{dir: dir, next: ReceiptSlot{Seq: last.Seq + 1}}
}

// Write makes watermark wm, highest op highest and the encoded bitslice
// catalog cat (ReceiptFits(cat) must hold) durable for engine engine: one
// write of the next slot and one fdatasync (the first Write of
// a file it creates also syncs the directory). The caller must have made
// durable everything wm covers first. On an error the slot in force is
// unknown until a later Write succeeds; the previous slot is never touched.
func (r *Receipt) Write(engine, wm, highest uint64, cat []byte) error {
	path := filepath.Join(r.dir, ReceiptName)
	created := false
	if r.f == nil {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
		if err != nil {
			return kverr.Errorf("open %s: %w", path, err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return kverr.Errorf("open %s: %w", path, err)
		}
		r.f, created = f, st.Size() < receiptSlots*ReceiptSlotSize
	}
	s := r.next
	s.Engine, s.Watermark, s.Highest = engine, wm, highest
	off := int64(s.Seq%receiptSlots) * ReceiptSlotSize
	if _, err := r.f.WriteAt(s.encode(cat), off); err != nil {
		return kverr.Errorf("write %s: %w", path, err)
	}
	if created {
		// The file's length reaches both slots before the first sync, so
		// that a later write never changes it (fdatasync then writes the
		// slot alone).
		if err := r.f.Truncate(receiptSlots * ReceiptSlotSize); err != nil {
			return kverr.Errorf("write %s: %w", path, err)
		}
	}
	if err := unix.Fdatasync(int(r.f.Fd())); err != nil {
		return kverr.Errorf("sync %s: %w", path, err)
	}
	failpoint.FileSynced(r.f, 0, -1)
	if created {
		if err := fsutil.SyncDir(r.dir); err != nil {
			return kverr.Errorf("sync %s: %w", r.dir, err)
		}
	}
	r.next.Seq++
	return nil
}

// Close closes the receipt file.
func (r *Receipt) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return kverr.Errorf("close %s: %w", filepath.Join(r.dir, ReceiptName), err)
	}
	return nil
}
