package enginedir

import (
	"encoding/binary"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

const (
	// EngineIDMeta is the name of the storage meta entry holding the
	// engine's id (8 bytes, big-endian, never 0): the owner stamped in the
	// header of every bitslice file the engine creates or adopts.
	EngineIDMeta = "kvbuf/engine-id"

	// BitsCatalogMeta is the name of the storage meta entry holding the
	// bitslice catalog (see BitsCatalog).
	BitsCatalogMeta = "kvbuf/bitslices"
)

// EncodeEngineID and ParseEngineID convert an engine id to and from its
// meta entry.
func EncodeEngineID(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// ParseEngineID decodes the engine id meta entry; anything but 8 bytes
// holding a nonzero id wraps kverr.ErrCorruptDir.
func ParseEngineID(b []byte) (uint64, error) {
	if len(b) != 8 || binary.BigEndian.Uint64(b) == 0 {
		return 0, kverr.Errorf("engine id record %x: %w", b, kverr.ErrCorruptDir)
	}
	return binary.BigEndian.Uint64(b), nil
}

// BitsEntry is the bitslice catalog's record of one bitslice file, as of
// the engine's last flush that wrote it.
type BitsEntry struct {
	// Gen is the write generation of the last update the engine made
	// durable (the file's header holds at least this one: the file is
	// synced before the store records it). 0 for a file never written
	// since it was created or catalogued.
	Gen uint64
	// Len is the file's length in bits then (lengths only grow).
	Len uint64
	// V1 marks a file catalogued from a format-1 engine and not written
	// since: its header may still be version 1, without owner.
	V1 bool
}

// BitsCatalog maps every bitslice of an engine to its record. Every
// bitslice whose data the watermark covers is in it: a bitslice is
// recorded in the same store batch as the first flush that writes it.
//
// Its encoding is text, one line per bitslice, sorted by name (LF is "\n",
// SP one space):
//
//	catalog = *( name SP gen SP len [ SP "v1" ] LF )
type BitsCatalog map[string]BitsEntry

// Encode returns c's canonical encoding.
func (c BitsCatalog) Encode() []byte {
	var b []byte
	for _, name := range slices.Sorted(maps.Keys(c)) {
		e := c[name]
		b = append(b, name...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Gen, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Len, 10)
		if e.V1 {
			b = append(b, " v1"...)
		}
		b = append(b, '\n')
	}
	return b
}

// ParseBitsCatalog decodes a bitslice catalog. Anything malformed (a bad
// name or number, a name listed twice) wraps kverr.ErrCorruptDir.
func ParseBitsCatalog(b []byte) (BitsCatalog, error) {
	c := BitsCatalog{}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return c, nil
	}
	for i, line := range strings.Split(s, "\n") {
		bad := func(why string) (BitsCatalog, error) {
			return nil, kverr.Errorf("bitslice catalog line %d %.80q: %s: %w", i+1, line, why, kverr.ErrCorruptDir)
		}
		f := strings.Split(line, " ")
		if len(f) != 3 && (len(f) != 4 || f[3] != "v1") {
			return bad("want name, generation, length")
		}
		if CheckName("bitslice", f[0]) != nil {
			return bad("bad bitslice name")
		}
		if _, dup := c[f[0]]; dup {
			return bad("bitslice listed twice")
		}
		gen, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return bad("bad generation")
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return bad("bad length")
		}
		c[f[0]] = BitsEntry{Gen: gen, Len: n, V1: len(f) == 4}
	}
	return c, nil
}

// Clone returns a copy of c.
func (c BitsCatalog) Clone() BitsCatalog { return maps.Clone(c) }

// BitsHeader is what the identity check needs of a bitslice file's header.
type BitsHeader struct {
	Version int    // format version: 1 has no owner or generation
	Owner   uint64 // the engine id stamped in the file
	Gen     uint64 // the write generation of its last update
	Len     uint64 // length in bits
}

// CheckBitsFile checks that the file of bitslice name, whose header is h,
// is the one the engine with id engineID recorded as e (ok: it is in the
// catalog) or, if it is not in the catalog, that the engine made it. The
// error, wrapping kverr.ErrCorruptDir, says what is wrong: another engine's file, a
// version-1 file where the engine never had one, an older copy (a lower
// generation), a shorter file.
func CheckBitsFile(name string, h BitsHeader, e BitsEntry, ok bool, engineID uint64) error {
	bad := func(format string, args ...any) error {
		return kverr.Errorf("bitslice %q: "+format+": %w", append([]any{name}, append(args, kverr.ErrCorruptDir)...)...)
	}
	switch {
	case h.Version == 1 && !(ok && e.V1):
		return bad("a format-1 file this engine never had (not in its catalog as one)")
	case h.Version != 1 && h.Owner != engineID:
		return bad("the file belongs to another engine (owner %016x, this engine is %016x)", h.Owner, engineID)
	case !ok:
		return nil // made by this engine, not flushed since: nothing covered is lost
	case h.Gen < e.Gen:
		return bad("an older copy: the file's last write is generation %d, the engine recorded generation %d", h.Gen, e.Gen)
	case h.Len < e.Len:
		return bad("the file is %d bits long, the engine recorded %d", h.Len, e.Len)
	}
	return nil
}
