package buffer

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// A node is one key of a KV table: its skip-list links, its key bytes and a
// pointer to its current value record, in one allocation.
//
// Layout of the allocation: the node header (32 bytes), then the key bytes,
// padding to a multiple of 4, and the key's first value record when it is
// small (at most inlineMax bytes). With an 8-byte key and a 16-byte value the
// whole node is one 64-byte object, so a pending hit touches the slot and one
// cache line of the node.
//
// A node is never unlinked or freed while its table is live: a table only
// grows until it is sealed, flushed and cleared. The key never changes. val
// changes when the key is overwritten or deleted: each value record is
// immutable once published, so a reader that loaded val reads a consistent
// value without a lock.
//
// A new node is published with val nil, first into the skip list, then into
// its slot, and its first record is stored last: that store is the write's
// one linearization point for both read paths (a Get probing slots and a
// scan walking the list). Readers treat a node whose val is nil as absent
// from its table. Publishing the value with the node instead let a scan see
// a Put in progress and a Get after that scan miss it.
type node struct {
	val   atomic.Pointer[byte] // current value record (see rec)
	next0 atomic.Pointer[node] // level-0 successor
	up    *atomic.Pointer[node]
	klen  uint32
	h     uint8 // tower height, 1..maxLevel
}

const (
	nodeHdr   = int(unsafe.Sizeof(node{}))
	inlineMax = 64 // largest value stored inline with its node
	maxLevel  = 12 // skip-list height: 4^12 keys per shard before it degrades
	recHdr    = 4  // a value record's length prefix
	// tombLen marks a tombstone record (no value can be that long: values
	// are limited to MaxValueSizeLimit).
	tombLen = ^uint32(0)
)

// Value records are [length uint32][bytes]. These two are shared by every
// tombstone and every empty value, and are never written.
var (
	tombRec  = [recHdr]byte{0xff, 0xff, 0xff, 0xff}
	emptyRec [recHdr]byte
)

// tombstone returns the shared tombstone record.
func tombstone() *byte { return &tombRec[0] }

// rec decodes a value record: the value (nil for an empty value) and whether
// the record is a tombstone. The bytes are immutable: callers must not
// modify them.
func rec(p *byte) (v []byte, del bool) {
	n := *(*uint32)(unsafe.Pointer(p))
	if n == tombLen {
		return nil, true
	}
	if n == 0 {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), recHdr)), n), false
}

// newRec allocates a record holding a copy of v, and returns it with the
// bytes it costs.
func newRec(v []byte) (*byte, int64) {
	if len(v) == 0 {
		return &emptyRec[0], 0
	}
	b := make([]byte, recHdr+len(v))
	*(*uint32)(unsafe.Pointer(&b[0])) = uint32(len(v))
	copy(b[recHdr:], v)
	return &b[0], sizeClass(len(b))
}

// key returns the node's key. The bytes are immutable and live as long as the
// node.
func (n *node) key() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(n), nodeHdr)), n.klen)
}

// next returns the link pointer of level l (0 <= l < n.h).
func (n *node) next(l int) *atomic.Pointer[node] {
	if l == 0 {
		return &n.next0
	}
	return (*atomic.Pointer[node])(unsafe.Add(unsafe.Pointer(n.up), uintptr(l-1)*unsafe.Sizeof(atomic.Pointer[node]{})))
}

// newNode allocates a node for key k with height h and the record of its
// first value v (a tombstone if del), and returns them with the heap bytes
// they cost (node, tower, out-of-line value). The node's val is left nil:
// the caller stores the record once the node is reachable (see node).
func newNode(k []byte, v []byte, del bool, h int) (*node, *byte, int64) {
	keyEnd := (len(k) + 3) &^ 3
	need := keyEnd
	inline := !del && len(v) > 0 && len(v) <= inlineMax
	if inline {
		need += recHdr + len(v)
	}
	n, data, size := allocNode(need)
	n.klen = uint32(len(k))
	n.h = uint8(h)
	copy(data, k)
	cost := size
	var first *byte
	switch {
	case del:
		first = tombstone()
	case inline:
		r := data[keyEnd:]
		*(*uint32)(unsafe.Pointer(&r[0])) = uint32(len(v))
		copy(r[recHdr:], v)
		first = &r[0]
	default:
		p, c := newRec(v)
		first = p
		cost += c
	}
	if h > 1 {
		tower := make([]atomic.Pointer[node], h-1)
		n.up = &tower[0]
		cost += sizeClass((h - 1) * int(unsafe.Sizeof(atomic.Pointer[node]{})))
	}
	return n, first, cost
}

// newHead allocates a skip-list head: an empty key with a full tower.
func newHead() *node {
	n, _, _ := newNode(nil, nil, true, maxLevel)
	return n
}

// nodeN is a node followed by D bytes of key and inline value: one
// allocation whose size is a Go size class, so no byte of it is wasted.
type nodeN[D any] struct {
	n node
	d D
}

func alloc[D any]() (*node, []byte, int64) {
	p := new(nodeN[D])
	return &p.n, unsafe.Slice((*byte)(unsafe.Pointer(&p.d)), unsafe.Sizeof(p.d)), int64(unsafe.Sizeof(*p))
}

// allocNode returns a node with at least need bytes of data after it. The
// ladder follows Go's size classes (node header included) up to 32 KiB and
// whole 8 KiB pages above, up to MaxKeySizeLimit plus an inline value.
func allocNode(need int) (*node, []byte, int64) {
	switch {
	case need <= 16:
		return alloc[[16]byte]()
	case need <= 32:
		return alloc[[32]byte]()
	case need <= 48:
		return alloc[[48]byte]()
	case need <= 64:
		return alloc[[64]byte]()
	case need <= 80:
		return alloc[[80]byte]()
	case need <= 96:
		return alloc[[96]byte]()
	case need <= 128:
		return alloc[[128]byte]()
	case need <= 160:
		return alloc[[160]byte]()
	case need <= 224:
		return alloc[[224]byte]()
	case need <= 288:
		return alloc[[288]byte]()
	case need <= 352:
		return alloc[[352]byte]()
	case need <= 480:
		return alloc[[480]byte]()
	case need <= 608:
		return alloc[[608]byte]()
	case need <= 736:
		return alloc[[736]byte]()
	case need <= 992:
		return alloc[[992]byte]()
	case need <= 1248:
		return alloc[[1248]byte]()
	case need <= 1504:
		return alloc[[1504]byte]()
	case need <= 2016:
		return alloc[[2016]byte]()
	case need <= 3040:
		return alloc[[3040]byte]()
	case need <= 4064:
		return alloc[[4064]byte]()
	case need <= 5344:
		return alloc[[5344]byte]()
	case need <= 8160:
		return alloc[[8160]byte]()
	case need <= 12256:
		return alloc[[12256]byte]()
	case need <= 16352:
		return alloc[[16352]byte]()
	case need <= 24544:
		return alloc[[24544]byte]()
	case need <= 32736:
		return alloc[[32736]byte]()
	case need <= 49120:
		return alloc[[49120]byte]()
	case need <= 65504:
		return alloc[[65504]byte]()
	default:
		return alloc[[81888]byte]()
	}
}

// sizeClass rounds n up to the size of the heap object Go allocates for it
// (classes up to 32 KiB, pages above), for honest PendingBytes.
func sizeClass(n int) int64 {
	if n <= 0 {
		return 0
	}
	if n > 32<<10 {
		return int64((n + 8191) &^ 8191)
	}
	for _, c := range goSizeClasses {
		if n <= int(c) {
			return int64(c)
		}
	}
	return 32 << 10
}

// goSizeClasses are the runtime's small-object size classes (runtime/sizeclasses.go).
var goSizeClasses = [...]uint16{
	8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280,
	1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528,
	6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072,
	20480, 21760, 24576, 27264, 28672, 32768,
}

// randomHeight draws a tower height with p = 1/4 per extra level from the
// xorshift state *x.
func randomHeight(x *uint64) int {
	v := *x
	v ^= v << 13
	v ^= v >> 7
	v ^= v << 17
	*x = v
	h := 1 + bits.TrailingZeros64(v|1<<62)/2
	return min(h, maxLevel)
}
