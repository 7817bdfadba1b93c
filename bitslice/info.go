package bitslice

import (
	"encoding/binary"
	"math/bits"
	"os"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Info describes a bitslice file, for kvtool inspect and for logs.
type Info struct {
	Path       string // as given to Open, Create or ReadInfo
	Version    int    // on-disk format version of the newest valid header (1 or 2)
	Len        uint64 // length in bits
	Ones       uint64 // number of set bits
	Watermark  uint64 // persisted watermark (from the newest valid header)
	Owner      uint64 // the engine the file belongs to (0: none; always 0 in version 1)
	Gen        uint64 // the owner's write generation of the last update (0 in version 1)
	Seq        uint64 // sequence number of the newest valid header
	Slot       int    // header slot (0 or 1) that header came from
	ValidSlots int    // header slots that are valid: 2 normally, 1 after a torn write or before the first update
	FileSize   int64  // bytes, including the header area
}

// Info describes the open file. After Close, Ones is 0.
func (f *File) Info() Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Info{
		Path:       f.path,
		Version:    int(f.version),
		Len:        f.nbits.Load(),
		Ones:       f.CountOnes(),
		Watermark:  f.persisted.Load(),
		Owner:      f.owner.Load(),
		Gen:        f.gen.Load(),
		Seq:        f.seq,
		Slot:       slotFor(f.seq),
		ValidSlots: f.valid,
		FileSize:   f.size,
	}
}

// ReadInfo validates the file at path exactly as Open does and describes
// it, reading through the descriptor: it maps nothing, takes no lock and
// writes nothing, so it works on a file another process has open (and may
// then see it mid-update). It reads every data word to count the set bits.
func ReadInfo(path string) (Info, error) {
	fd, err := os.Open(path)
	if err != nil {
		return Info{}, kverr.Errorf("%w", err) // a *PathError naming path
	}
	defer fd.Close()
	p, size, err := readHeader(fd)
	if err != nil {
		return Info{}, kverr.Errorf("%s: %w", path, err)
	}
	ones, err := countOnes(fd, p.nbits)
	if err != nil {
		// Untested here: readHeader checked the size, so only an I/O error
		// or a file shrinking meanwhile; countOnes has TestCountOnesShortFile.
		return Info{}, kverr.Errorf("%s: %w", path, err)
	}
	return Info{
		Path:       path,
		Version:    int(p.version),
		Len:        p.nbits,
		Ones:       ones,
		Watermark:  p.watermark,
		Owner:      p.owner,
		Gen:        p.gen,
		Seq:        p.seq,
		Slot:       p.slot,
		ValidSlots: p.valid,
		FileSize:   size,
	}, nil
}

// countOnes counts the set bits of the data area with pread, 64 KiB at a time.
func countOnes(fd *os.File, nbits uint64) (uint64, error) {
	n := words(nbits)
	buf := make([]byte, 64<<10)
	var ones int
	for w := uint64(0); w < n; {
		c := min(n-w, uint64(len(buf)/8))
		b := buf[:c*8]
		if _, err := fd.ReadAt(b, DataOffset+int64(w)*8); err != nil {
			return 0, kverr.Errorf("read data words %d..%d: %w", w, w+c, err)
		}
		for k := range c {
			ones += bits.OnesCount64(binary.LittleEndian.Uint64(b[k*8:]) & tailMask(nbits, w+k))
		}
		w += c
	}
	return uint64(ones), nil
}
