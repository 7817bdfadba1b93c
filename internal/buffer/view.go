package buffer

import (
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/invariants"
)

// The view core: the steps of the view lifecycle that the KV overlay and
// the Bits overlay take the same way, written once. Each overlay keeps its
// own view type (a KV view carries the read tier's retained tables, a Bits
// view the file mapping and the direct path) and its own publication
// (kvView stores, Bits.publish), and calls these for the rest:
//
//   - sealedCut finds a generation's tables at the old end of the sealed
//     list (Release, Retain);
//   - pinTables and unpinTables take and drop the pins that keep tables
//     from being recycled while an iterator or a snapshot reads them.
//
// The rules they keep are the overlays': publication order 6 and 10
// (protocol.go) for KV, B8 and B11 (bits_protocol.go) for Bits. The core
// takes no lock and publishes nothing: its callers hold vmu where a rule
// asks for it and publish the new view themselves.

// viewTable is what the core needs of a table: the generation that froze
// it and its pin count. *table and *bitsTable implement it.
type viewTable interface {
	generation() uint64
	pinCount() *atomic.Int32
}

func (t *table) generation() uint64          { return t.gen }
func (t *table) pinCount() *atomic.Int32     { return &t.pins }
func (t *bitsTable) generation() uint64      { return t.gen }
func (t *bitsTable) pinCount() *atomic.Int32 { return &t.pins }

// sealedCut returns where generation g's tables begin in sealed (newest
// first, so they are its tail): sealed[cut:] are g's. ok is false when g
// has no table there (already released, or never frozen). Under vmu.
func sealedCut[T viewTable](sealed []T, g uint64) (cut int, ok bool) {
	cut = len(sealed)
	for cut > 0 && sealed[cut-1].generation() == g {
		cut--
	}
	return cut, cut < len(sealed)
}

// pinTables pins every table of ts. The caller holds vmu and took ts from
// the current view, so no Release can take them out of the view between
// the view's load and the pins (publication order 10, B11), or already
// holds a pin on each (a snapshot's iterator), so none can be recycled.
func pinTables[T viewTable](ts []T) {
	for _, t := range ts {
		t.pinCount().Add(1) // publication order 10, B11
	}
}

// unpinTables drops the pins pinTables took. A table with no pin left may
// be recycled by the next Release that takes it out of the view.
func unpinTables[T viewTable](ts []T) {
	for _, t := range ts {
		if t.pinCount().Add(-1) < 0 {
			invariants.Check(false, "buffer: table unpinned more often than pinned")
		}
	}
}
