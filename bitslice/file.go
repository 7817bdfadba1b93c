package bitslice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// minMapping is the smallest mapping reserved for the data area. Mappings
// grow in powers of two from here, so Grow rarely has to remap.
const minMapping = 64 << 10

// WordChange rewrites the bits of data word Word selected by Mask:
// word = word&^Mask | Bits&Mask.
type WordChange struct {
	Word, Mask, Bits uint64
}

// File is an open bitslice file. All methods are safe for concurrent use.
type File struct {
	path string
	fd   *os.File

	// cur is the view readers use; nil after Close.
	cur atomic.Pointer[View]
	// nbits mirrors the current length so Len works after Close.
	nbits atomic.Uint64
	// staged is the watermark the next Sync persists; persisted is the one
	// in the newest header on disk. The same for the owner and the write
	// generation (version 2 header fields).
	staged, persisted  atomic.Uint64
	stagedOwner, owner atomic.Uint64
	stagedGen, gen     atomic.Uint64

	// wmu is read-locked by Set, Apply and ApplyWords and write-locked by
	// Close, so that no store lands in the file after Close returns.
	wmu sync.RWMutex

	// mu serialises Grow, Sync and Close and guards the fields below.
	mu      sync.Mutex
	closed  bool
	seq     uint64    // sequence number of the newest header on disk
	version uint32    // format version of the newest header on disk
	covered uint64    // watermark staged when the last successful Sync or SyncLagged began: its changes are durable
	valid   int       // header slots valid on disk (1 or 2)
	size    int64     // file size in bytes
	reg     *region   // mapping the current view uses
	regions []*region // every mapping still in place, current one last
	live    *atomic.Int64
}

// View is an immutable snapshot of the mapping readers use: the data words
// and the length at one instant (the length changes only by Grow, which
// publishes a new View). It keeps its mapping alive while it is reachable,
// so a reader that holds it may load its words without a lock, even after
// Close: the mapping stays a mapping of the file, and reads its words, until
// no View refers to it (Close leaves it in place). Writes through the
// File land in the words of every View of it (they map the same file
// pages); read them with sync/atomic.
type View struct {
	words []uint64 // exactly words(nbits) long: indexing past it panics, never faults
	nbits uint64
	reg   *region // keeps the mapping alive while a reader holds the view
}

// View returns the current View, or nil after Close.
func (f *File) View() *View { return f.cur.Load() }

// Len is the view's length in bits.
func (v *View) Len() uint64 { return v.nbits }

// Words returns the data words: bit i is bit i%64 of word i/64. Load them
// with sync/atomic (writers store with it), and keep v reachable
// (runtime.KeepAlive) until the last load: the slice alone does not keep
// the mapping. Bits at or past Len in the last word are zero unless the
// file was damaged; mask them (as Word does) where that matters.
func (v *View) Words() []uint64 { return v.words }

// region is one mapping of the data area, reserved larger than the file.
type region struct {
	m    mmap.MMap
	full []uint64 // every word of m; only a prefix is backed by the file
}

// Create makes a new bitslice file of nbits zero bits at path, with no
// owner, and opens it. It fails with an error wrapping fs.ErrExist if path
// exists, and with kvbuf.ErrOutOfRange if nbits exceeds MaxBits. The file (mode
// 0600) is built under a temporary name in the same directory and renamed
// (without replacing) into place, so a crash never leaves a half-made file
// at path.
func Create(path string, nbits uint64) (*File, error) { return CreateOwned(path, nbits, 0) }

// CreateOwned is Create with the file's header naming owner (see Owner):
// an engine stamps the files it creates with its id, so that a file of
// another engine is never taken for its own.
func CreateOwned(path string, nbits, owner uint64) (_ *File, err error) {
	if nbits > MaxBits {
		return nil, kverr.Errorf("create %s: length %d bits (maximum %d): %w", path, nbits, uint64(MaxBits), kverr.ErrOutOfRange)
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, kverr.Errorf("create %s: %w", path, fs.ErrExist)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".creating-*")
	if err != nil {
		return nil, kverr.Errorf("create %s: %w", path, err)
	}
	tmpName := tmp.Name()
	linked := false
	defer func() {
		if err != nil {
			tmp.Close()
			if !linked {
				os.Remove(tmpName)
			}
		}
	}()
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// Untested: nobody else can hold a lock on a file just made under a
		// random name; flock then fails only with ENOLCK or EINTR.
		return nil, kverr.Errorf("create %s: lock: %w", path, err)
	}
	size := dataSize(nbits)
	if err := allocate(tmp, 0, size); err != nil {
		return nil, kverr.Errorf("create %s: allocate %d bytes: %w", path, size, err)
	}
	h := header{seq: 1, nbits: nbits, owner: owner, version: Version}
	slot := encodeSlot(h)
	if _, err := tmp.WriteAt(slot[:], int64(slotFor(h.seq))*slotStride); err != nil {
		// Untested: the blocks are allocated, so only an I/O error.
		return nil, kverr.Errorf("create %s: write header: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		// Untested: fsync fails only on an I/O error.
		return nil, kverr.Errorf("create %s: sync: %w", path, err)
	}
	failpoint.FileSynced(tmp, 0, -1)
	if err := failpoint.Hit(failpoint.BitsliceCreatePublish); err != nil {
		return nil, kverr.Errorf("create %s: %w", path, err)
	}
	if err := fsutil.Publish(tmpName, path); err != nil {
		// Untested here: path was absent at the Lstat above, so ErrExist
		// needs a racing creator (publish's refusal to replace has
		// TestPublishDoesNotReplace), and other errors need an I/O error or
		// the directory changing meanwhile.
		if errors.Is(err, fs.ErrExist) {
			return nil, kverr.Errorf("create %s: %w", path, fs.ErrExist)
		}
		return nil, kverr.Errorf("create %s: %w", path, err)
	}
	linked = true
	if err := failpoint.Hit(failpoint.BitsliceCreateDirSync); err != nil {
		return nil, kverr.Errorf("create %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// Untested here: the directory held the temporary file a moment
		// ago, so only an I/O error or its removal meanwhile (syncDir's
		// open error has TestSyncDirMissing).
		return nil, kverr.Errorf("create %s: %w", path, err)
	}
	f, err := newFile(path, tmp, parsed{header: h, slot: 0, valid: 1}, size)
	if err != nil {
		// Untested: newFile fails only when mmap does (see mapRegion).
		return nil, err
	}
	return f, nil
}

// Open opens an existing bitslice file for reading and writing and takes its
// lock. Everything is validated before anything is mapped: a file that is
// not a bitslice, is truncated, or has no valid header slot gets an error
// wrapping kvbuf.ErrCorruptBits that says what is wrong; a file someone else holds
// gets kvbuf.ErrLocked.
func Open(path string) (_ *File, err error) {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, unix.EISDIR) {
		// O_RDWR fails on a directory before readHeader could say so.
		return nil, kverr.Errorf("%s: is a directory: %w", path, kverr.ErrCorruptBits)
	}
	if err != nil {
		return nil, kverr.Errorf("%w", err) // a *PathError naming path
	}
	defer func() {
		if err != nil {
			fd.Close()
		}
	}()
	if err := unix.Flock(int(fd.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, kverr.Errorf("open %s: %w", path, kverr.ErrLocked)
		}
		// Untested: besides EWOULDBLOCK, flock fails only with ENOLCK or EINTR.
		return nil, kverr.Errorf("open %s: lock: %w", path, err)
	}
	p, size, err := readHeader(fd)
	if err != nil {
		return nil, kverr.Errorf("%s: %w", path, err)
	}
	if err := fillHoles(fd, size); err != nil {
		// Untested: needs a sparse file on a full disk (RLIMIT_FSIZE does
		// not apply to fallocate with FALLOC_FL_KEEP_SIZE).
		return nil, kverr.Errorf("open %s: allocate: %w", path, err)
	}
	return newFile(path, fd, p, size)
}

// readHeader validates fd as a bitslice file and returns its newest header.
func readHeader(fd *os.File) (parsed, int64, error) {
	st, err := fd.Stat()
	if err != nil {
		// Untested: fstat of an open descriptor fails only on an I/O error.
		return parsed{}, 0, err
	}
	if st.IsDir() {
		return parsed{}, 0, kverr.Errorf("is a directory: %w", kverr.ErrCorruptBits)
	}
	if !st.Mode().IsRegular() {
		return parsed{}, 0, kverr.Errorf("not a regular file (%v): %w", st.Mode().Type(), kverr.ErrCorruptBits)
	}
	size := st.Size()
	buf := make([]byte, min(size, DataOffset))
	if _, err := fd.ReadAt(buf, 0); err != nil {
		// Untested: buf is no longer than the file just measured, so only an
		// I/O error or a file shrinking meanwhile.
		return parsed{}, 0, kverr.Errorf("read header: %w", err)
	}
	p, err := parseHeader(buf, size)
	return p, size, err
}

// newFile maps an opened, locked, validated file and publishes its view.
// On error the caller still owns fd.
func newFile(path string, fd *os.File, p parsed, size int64) (*File, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		// Untested: only reachable on a big-endian host.
		return nil, kverr.Errorf("open %s: data words are little-endian and this host is not", path)
	}
	f := &File{path: path, fd: fd, seq: p.seq, version: p.version, valid: p.valid, size: size, live: new(atomic.Int64)}
	need := int64(words(p.nbits)) * 8
	reg, err := f.mapRegion(need)
	if err != nil {
		// Untested: see mapRegion.
		return nil, kverr.Errorf("open %s: %w", path, err)
	}
	f.reg = reg
	f.regions = []*region{reg}
	f.nbits.Store(p.nbits)
	f.staged.Store(p.watermark)
	f.persisted.Store(p.watermark)
	f.covered = p.watermark
	f.stagedOwner.Store(p.owner)
	f.owner.Store(p.owner)
	f.stagedGen.Store(p.gen)
	f.gen.Store(p.gen)
	f.cur.Store(reg.view(p.nbits))
	return f, nil
}

// mappingSize is the reservation for a data area of need bytes: a power of
// two, at least minMapping.
func mappingSize(need int64) (int, error) {
	c := int64(minMapping)
	for c < need {
		if c > math.MaxInt64/2 { // doubling would overflow (and loop forever)
			return 0, fmt.Errorf("mapping of %d bytes is too large", need)
		}
		c *= 2
	}
	if c > math.MaxInt {
		// Untested: need is at most dataSize(MaxBits), so this is reachable
		// only where int is 32 bits.
		return 0, fmt.Errorf("mapping of %d bytes does not fit this platform", c)
	}
	return int(c), nil
}

// mapRegion maps the data area with room for at least need bytes. The
// mapping extends past the end of the file; only words the file backs are
// ever touched.
func (f *File) mapRegion(need int64) (*region, error) {
	n, err := mappingSize(need)
	if err != nil {
		return nil, err // untested: see mappingSize
	}
	m, err := mmap.MapRegion(f.fd, n, mmap.RDWR, 0, DataOffset)
	if err != nil {
		// Untested: the descriptor is a locked, validated regular file open
		// read-write, so mmap fails only for want of memory or address space
		// (ENOMEM) or on a file system that cannot map files.
		return nil, kverr.Errorf("mmap %d bytes: %w", n, err)
	}
	r := &region{m: m, full: unsafe.Slice((*uint64)(unsafe.Pointer(&m[0])), len(m)/8)}
	live := f.live
	live.Add(1)
	// The mapping goes away once no view (and so no reader) refers to r,
	// before or after Close, which leaves it in place: a reader that loaded
	// a view before Close reads the file's words, never a zero or a fault.
	runtime.AddCleanup(r, func(m mmap.MMap) {
		_ = m.Unmap()
		live.Add(-1)
	}, m)
	return r, nil
}

func (r *region) view(nbits uint64) *View {
	n := words(nbits)
	return &View{words: r.full[:n:n], nbits: nbits, reg: r}
}

// Path is the path the file was opened or created with.
func (f *File) Path() string { return f.path }

// Len is the length in bits: every index below it can be Set. After Close
// it is the length at Close.
func (f *File) Len() uint64 {
	if v := f.cur.Load(); v != nil {
		return v.nbits
	}
	return f.nbits.Load()
}

// Get reports bit i. It is false at or past Len and after Close. Get takes
// no lock and does not allocate.
func (f *File) Get(i uint64) bool {
	v := f.cur.Load()
	if v == nil || i >= v.nbits {
		return false
	}
	w := atomic.LoadUint64(&v.words[i>>6])
	runtime.KeepAlive(v) // the mapping must outlive the load
	return w>>(i&63)&1 != 0
}

// Word returns the 64 bits [64w, 64w+64) with bit 64w in the lowest place.
// Bits at or past Len read as 0, as does everything after Close.
func (f *File) Word(w uint64) uint64 {
	v := f.cur.Load()
	if v == nil || w >= uint64(len(v.words)) {
		return 0
	}
	x := atomic.LoadUint64(&v.words[w]) & tailMask(v.nbits, w)
	runtime.KeepAlive(v)
	return x
}

// tailMask selects the bits of word w that lie below nbits.
func tailMask(nbits, w uint64) uint64 {
	if r := nbits - w*64; r < 64 {
		return 1<<r - 1
	}
	return ^uint64(0)
}

// Set sets bit i to v. It fails with kvbuf.ErrOutOfRange at or past Len and with
// kvbuf.ErrClosed after Close.
func (f *File) Set(i uint64, v bool) error {
	f.wmu.RLock()
	defer f.wmu.RUnlock()
	vw := f.cur.Load()
	if vw == nil {
		return f.errClosed()
	}
	if i >= vw.nbits {
		return kverr.Errorf("%s: set bit %d (length %d): %w", f.path, i, vw.nbits, kverr.ErrOutOfRange)
	}
	bit := uint64(1) << (i & 63)
	if v {
		atomic.OrUint64(&vw.words[i>>6], bit)
	} else {
		atomic.AndUint64(&vw.words[i>>6], ^bit)
	}
	runtime.KeepAlive(vw)
	return nil
}

// ApplyWords applies each word change. changes must be sorted by Word
// (non-decreasing; later changes to a word apply after earlier ones). Every
// change is checked before any word is written: unsorted input, a word past
// the end, or a Mask selecting bits at or past Len fails with kvbuf.ErrOutOfRange
// and writes nothing.
func (f *File) ApplyWords(changes []WordChange) error {
	return f.applying(func(vw *View) error { return f.applyWords(vw, changes) })
}

// applying runs apply on the current mapping with the growth lock's shared
// side held (a concurrent Grow waits), or fails with ErrClosed after Close:
// what ApplyWords and ApplyMasked share.
func (f *File) applying(apply func(vw *View) error) error {
	f.wmu.RLock()
	defer f.wmu.RUnlock()
	vw := f.cur.Load()
	if vw == nil {
		return f.errClosed()
	}
	err := apply(vw)
	runtime.KeepAlive(vw)
	return err
}

func (f *File) applyWords(vw *View, changes []WordChange) error {
	n := uint64(len(vw.words))
	for k, c := range changes {
		if c.Word >= n {
			return kverr.Errorf("%s: apply word change %d: word %d (%d words): %w", f.path, k, c.Word, n, kverr.ErrOutOfRange)
		}
		if c.Mask&^tailMask(vw.nbits, c.Word) != 0 {
			return kverr.Errorf("%s: apply word change %d: mask %#x selects bits past length %d: %w",
				f.path, k, c.Mask, vw.nbits, kverr.ErrOutOfRange)
		}
		if k > 0 && c.Word < changes[k-1].Word {
			return kverr.Errorf("%s: apply word change %d: word %d after word %d (changes not sorted by word): %w",
				f.path, k, c.Word, changes[k-1].Word, kverr.ErrOutOfRange)
		}
	}
	for k, c := range changes {
		if k == len(changes)/2 {
			_ = failpoint.Hit(failpoint.BitsliceApplyWords) // a crash point only
		}
		storeMasked(&vw.words[c.Word], c.Mask, c.Bits)
	}
	return nil
}

// ApplyMasked applies len(mask) word changes to the consecutive data words
// from word first on: word first+j becomes word&^mask[j] | bits[j]&mask[j],
// one compare-and-swap each as in ApplyWords, and a word whose mask is 0 is
// not read at all. It is ApplyWords for a caller that holds its changes as
// a run of words (the engine's overlay, a page of pending bits at a time):
// no list of changes to build or to check word by word. bits must be as long
// as mask. Everything is checked before any word is written: a run past the
// end, or a mask selecting bits at or past Len in the last word, fails with
// kvbuf.ErrOutOfRange and writes nothing.
func (f *File) ApplyMasked(first uint64, mask, bits []uint64) error {
	return f.applying(func(vw *View) error { return f.applyMasked(vw, first, mask, bits) })
}

func (f *File) applyMasked(vw *View, first uint64, mask, bits []uint64) error {
	n := uint64(len(vw.words))
	if len(bits) != len(mask) {
		return kverr.Errorf("%s: apply %d masked words: %d bit words: %w", f.path, len(mask), len(bits), kverr.ErrOutOfRange)
	}
	if first > n || uint64(len(mask)) > n-first {
		return kverr.Errorf("%s: apply %d masked words from word %d (%d words): %w", f.path, len(mask), first, n, kverr.ErrOutOfRange)
	}
	if last := first + uint64(len(mask)); len(mask) > 0 && last == n {
		// Only the file's last word may hold bits past Len.
		if m := mask[len(mask)-1]; m&^tailMask(vw.nbits, n-1) != 0 {
			return kverr.Errorf("%s: apply masked word %d: mask %#x selects bits past length %d: %w",
				f.path, n-1, m, vw.nbits, kverr.ErrOutOfRange)
		}
	}
	words := vw.words[first : first+uint64(len(mask))]
	bits = bits[:len(mask)]
	half := len(mask) / 2
	for j, m := range mask {
		if j == half {
			_ = failpoint.Hit(failpoint.BitsliceApplyWords) // a crash point only
		}
		if m != 0 {
			storeMasked(&words[j], m, bits[j])
		}
	}
	return nil
}

// WriteWords stores words as the data words from word first on with
// pwrite, into the page cache the mapping shares, instead of through the
// mapping: no locked instruction per word, and no write fault on a page a
// sync left write-protected. It is for an owner that is the file's only
// writer while it runs (no Set, ApplyWords or other write may run
// concurrently: their changes could be lost) and whose readers do not
// depend on the words it changes until it returns: a concurrent reader of
// the mapping may see a word torn between its old and new bytes, so only
// the bits that change may read wrong (the engine's overlay keeps them
// pending in its tables until after the sync). Everything is checked
// before a byte is written: a run past the end, or bits set at or past
// Len in the file's last word, fails with kvbuf.ErrOutOfRange. A failed
// pwrite returns its error with some of the words written: the same call
// again writes them all.
func (f *File) WriteWords(first uint64, words []uint64) error {
	return f.applying(func(vw *View) error {
		n := uint64(len(vw.words))
		if first > n || uint64(len(words)) > n-first {
			return kverr.Errorf("%s: write %d words from word %d (%d words): %w", f.path, len(words), first, n, kverr.ErrOutOfRange)
		}
		if len(words) > 0 && first+uint64(len(words)) == n {
			if w := words[len(words)-1]; w&^tailMask(vw.nbits, n-1) != 0 {
				return kverr.Errorf("%s: write word %d: %#x sets bits past length %d: %w",
					f.path, n-1, w, vw.nbits, kverr.ErrOutOfRange)
			}
		}
		half := len(words) / 2
		for k, part := range [2][]uint64{words[:half], words[half:]} {
			if k == 1 {
				_ = failpoint.Hit(failpoint.BitsliceApplyWords) // a crash point only
				if err := failpoint.Hit(failpoint.BitsliceWriteWords); err != nil {
					return kverr.Errorf("%s: write %d words from word %d: %w", f.path, len(words), first, err)
				}
			}
			if len(part) == 0 {
				continue
			}
			off := DataOffset + int64(first+uint64(k*half))*8
			b := unsafe.Slice((*byte)(unsafe.Pointer(&part[0])), len(part)*8)
			if _, err := f.fd.WriteAt(b, off); err != nil {
				return kverr.Errorf("%s: write %d words from word %d: %w", f.path, len(words), first, err)
			}
		}
		return nil
	})
}

// StartWriteback asks the kernel to start writing words [first, first+n)
// of the file back to the disk, and returns without waiting: a Sync or
// SyncLagged after it then waits for less, the disk having worked while the
// caller did something else. It makes nothing durable and reports no write
// error (the sync after it does both); on systems without a way to start
// writeback it does nothing. Words past the file's end are ignored.
func (f *File) StartWriteback(first, n uint64) error {
	return f.applying(func(vw *View) error {
		w := uint64(len(vw.words))
		if first >= w || n == 0 {
			return nil
		}
		n = min(n, w-first)
		if err := startWriteback(f.fd, DataOffset+int64(first)*8, int64(n)*8); err != nil {
			return kverr.Errorf("%s: start writeback of %d words from word %d: %w", f.path, n, first, err)
		}
		return nil
	})
}

// storeMasked sets *p = *p&^mask | bits&mask with one compare-and-swap
// (none if the word already holds the bits; again if a concurrent Set
// changed it meanwhile). A locked instruction costs about as much as a
// cache miss: one instead of an OR and an AND halves what a word change
// costs. Each bit changes at most once, so a concurrent reader sees every
// bit either old or new.
func storeMasked(p *uint64, mask, bits uint64) {
	for {
		old := atomic.LoadUint64(p)
		nw := old&^mask | bits&mask
		if nw == old || atomic.CompareAndSwapUint64(p, old, nw) {
			return
		}
	}
}

// CountOnes is the number of set bits (0 after Close). It reads every word.
func (f *File) CountOnes() uint64 {
	v := f.cur.Load()
	if v == nil {
		return 0
	}
	var n int
	for w := range v.words {
		n += bits.OnesCount64(atomic.LoadUint64(&v.words[w]) & tailMask(v.nbits, uint64(w)))
	}
	runtime.KeepAlive(v)
	return uint64(n)
}

// Grow extends the file to nbits bits, the new bits zero. It is a no-op if
// nbits <= Len, and fails with kvbuf.ErrOutOfRange above MaxBits. The new blocks
// are allocated for real (see the package doc), zeroed and synced before a
// header with the new length is written; readers and writers carry on
// meanwhile on the old view, and see the new length once Grow returns.
func (f *File) Grow(nbits uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.errClosed()
	}
	old := f.nbits.Load()
	if nbits <= old {
		return nil
	}
	if nbits > MaxBits {
		return kverr.Errorf("%s: grow to %d bits (maximum %d): %w", f.path, nbits, uint64(MaxBits), kverr.ErrOutOfRange)
	}
	need := dataSize(nbits)
	if need > f.size {
		err := failpoint.Hit(failpoint.BitsliceGrowAllocate)
		if err == nil {
			err = allocate(f.fd, f.size, need-f.size)
		}
		if err != nil {
			return kverr.Errorf("%s: grow to %d bits: allocate: %w", f.path, nbits, err)
		}
		if err := f.fd.Sync(); err != nil {
			// Untested: fsync fails only on an I/O error.
			return kverr.Errorf("%s: grow to %d bits: sync: %w", f.path, nbits, err)
		}
		failpoint.FileSynced(f.fd, 0, -1)
		f.size = need
	}
	reg := f.reg
	if need-DataOffset > int64(len(reg.m)) {
		r, err := f.mapRegion(need - DataOffset)
		if err != nil {
			// Untested: see mapRegion.
			return kverr.Errorf("%s: grow to %d bits: %w", f.path, nbits, err)
		}
		f.regions = append(f.regions, r)
		reg = r
	}
	// Bits past the old length and words past the old end may hold stale
	// bytes (a file grown by a crashed Grow, or a corrupt tail): clear them
	// and make that durable before the header says they are zero bits.
	oldWords, newWords := words(old), words(nbits)
	if old%64 != 0 {
		atomic.AndUint64(&reg.full[oldWords-1], tailMask(old, oldWords-1))
	}
	for w := oldWords; w < newWords; w++ {
		if atomic.LoadUint64(&reg.full[w]) != 0 {
			atomic.StoreUint64(&reg.full[w], 0)
		}
	}
	start := (max(oldWords, 1) - 1) * 8 &^ (pageSize - 1)
	if err := msync(reg.m[start : newWords*8]); err != nil {
		// Untested: msync of a mapped, allocated range fails only on an I/O
		// error. The failpoint just below fails Grow at the next step
		// (TestFaultGrow, -tags kvbuf_failpoints).
		return kverr.Errorf("%s: grow to %d bits: msync: %w", f.path, nbits, err)
	}
	failpoint.FileSynced(f.fd, DataOffset+int64(start), int64(newWords*8-start))
	if err := failpoint.Hit(failpoint.BitsliceGrowHeader); err != nil {
		// Tested by TestFaultGrow under -tags kvbuf_failpoints.
		return kverr.Errorf("%s: grow to %d bits: %w", f.path, nbits, err)
	}
	h := header{seq: f.seq + 1, nbits: nbits, watermark: f.persisted.Load(), owner: f.owner.Load(), gen: f.gen.Load()}
	if err := f.writeHeader(h); err != nil {
		// Untested: see writeHeader; the failpoint above covers a failure
		// at this step (TestFaultGrow, -tags kvbuf_failpoints).
		return kverr.Errorf("%s: grow to %d bits: %w", f.path, nbits, err)
	}
	f.seq, f.valid, f.version = h.seq, 2, Version
	f.reg = reg
	f.cur.Store(reg.view(nbits))
	f.nbits.Store(nbits)
	return nil
}

// pageSize aligns msync ranges (mappings start page-aligned). It is read
// once; it is not mutable state.
var pageSize = uint64(os.Getpagesize())

// msync writes the dirty pages of b (page-aligned start) to disk.
func msync(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Msync(b, unix.MS_SYNC)
}

// writeHeader writes h into its slot and fdatasyncs.
func (f *File) writeHeader(h header) error {
	b := encodeSlot(h)
	// Untested errors: the header page always exists and is allocated, so
	// the write and the fdatasync fail only on an I/O error.
	if _, err := f.fd.WriteAt(b[:], int64(slotFor(h.seq))*slotStride); err != nil {
		return kverr.Errorf("write header slot %d: %w", slotFor(h.seq), err)
	}
	if err := unix.Fdatasync(int(f.fd.Fd())); err != nil {
		return kverr.Errorf("fdatasync header: %w", err)
	}
	// fdatasync writes back the pages dirtied through the mapping too.
	failpoint.FileSynced(f.fd, 0, -1)
	return nil
}

// SetWatermark stages op as the watermark the next Sync persists. The
// watermark only moves forward: a value below the staged one is ignored.
func (f *File) SetWatermark(op uint64) { stageMax(&f.staged, op) }

// SetGen stages g as the write generation the next Sync records in the
// header: an owner numbers its updates, so that an older copy of the file
// (a lower generation than the owner recorded elsewhere) is recognised. It
// only moves forward.
func (f *File) SetGen(g uint64) { stageMax(&f.stagedGen, g) }

// SetOwner stages owner as the file's owner, recorded by the next Sync (an
// engine adopting a version-1 file, or a checkpoint copy getting its own
// engine id).
func (f *File) SetOwner(owner uint64) { f.stagedOwner.Store(owner) }

func stageMax(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// Watermark is the watermark in the newest header on disk: the one Open
// would return after a crash now.
func (f *File) Watermark() uint64 { return f.persisted.Load() }

// Owner is the owner in the newest header on disk (0: none, and for a
// version-1 file).
func (f *File) Owner() uint64 { return f.owner.Load() }

// Version is the format version of the newest header on disk: 1 for a
// file written before owners and generations existed, until its first Sync
// or Grow.
func (f *File) Version() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int(f.version)
}

// Gen is the write generation in the newest header on disk (0 for a
// version-1 file and a new one).
func (f *File) Gen() uint64 { return f.gen.Load() }

// Sync makes every change that completed before the call durable, then
// records the staged watermark, generation and owner in the next header
// slot. A new watermark is a durability claim, so the data is made durable
// first (msync), then the header is written and fdatasynced. With the
// watermark unchanged, a new generation or owner claims nothing about the
// data: the header is written first and one fdatasync makes both durable
// (it writes back the pages dirtied through the shared mapping too; a crash
// before it leaves the new header or the old one, either over data the
// owner's watermark does not cover). With nothing new, only the msync is
// done. On error the previous header stays in force and Sync can be
// retried.
func (f *File) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.errClosed()
	}
	v := f.cur.Load()
	wm, owner, gen := f.staged.Load(), f.stagedOwner.Load(), f.stagedGen.Load()
	newWM := wm != f.persisted.Load()
	newID := owner != f.owner.Load() || gen != f.gen.Load() || f.version != Version
	if newWM || !newID {
		err := failpoint.Hit(failpoint.BitsliceSyncMsync)
		if err == nil {
			err = msync(f.reg.m[:len(v.words)*8])
		}
		if err != nil {
			// Tested through the failpoint by TestFaultSync under -tags
			// kvbuf_failpoints; a real msync fails only on an I/O error.
			return kverr.Errorf("%s: sync: msync: %w", f.path, err)
		}
		failpoint.FileSynced(f.fd, DataOffset, int64(len(v.words)*8))
	}
	if !newWM && !newID {
		f.covered = max(f.covered, wm)
		return nil
	}
	if err := failpoint.Hit(failpoint.BitsliceSyncHeader); err != nil {
		// Tested by TestFaultSync under -tags kvbuf_failpoints.
		return kverr.Errorf("%s: sync: %w", f.path, err)
	}
	h := header{seq: f.seq + 1, nbits: v.nbits, watermark: wm, owner: owner, gen: gen}
	if err := f.writeHeader(h); err != nil {
		// Untested: see writeHeader; the failpoint above covers a failure
		// at this step (TestFaultSync, -tags kvbuf_failpoints).
		return kverr.Errorf("%s: sync: %w", f.path, err)
	}
	f.synced(h, wm)
	return nil
}

// SyncLagged makes every change that completed before the call durable
// with one fdatasync instead of Sync's two, for an owner that keeps its
// own durable receipt (the engine's store) and needs the header for its
// generation: it writes the next header slot first, then fdatasyncs, which
// writes back the header and the data pages dirtied through the mapping
// together. Because a crash may keep that header and lose data pages, the
// header records the staged generation and owner and the lagged watermark:
// the one staged when the previous successful Sync or SyncLagged began,
// whose changes that sync made durable, never the one staged since (the
// next sync records it). So the persisted watermark is still never ahead
// of the data, and a generation claims nothing about the data (see Sync).
// With nothing new for the header, only the data is synced. On error the
// previous header stays in force and SyncLagged can be retried.
func (f *File) SyncLagged() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.errClosed()
	}
	v := f.cur.Load()
	staged := f.staged.Load()
	wm := max(f.covered, f.persisted.Load()) // L1: durable before this header is written
	owner, gen := f.stagedOwner.Load(), f.stagedGen.Load()
	newHeader := wm != f.persisted.Load() || owner != f.owner.Load() || gen != f.gen.Load() || f.version != Version
	if err := failpoint.Hit(failpoint.BitsliceSyncMsync); err != nil {
		// Tested by TestFaultSyncLagged under -tags kvbuf_failpoints.
		return kverr.Errorf("%s: sync: %w", f.path, err)
	}
	if !newHeader {
		if err := msync(f.reg.m[:len(v.words)*8]); err != nil {
			// Untested: a real msync fails only on an I/O error.
			return kverr.Errorf("%s: sync: msync: %w", f.path, err)
		}
		failpoint.FileSynced(f.fd, DataOffset, int64(len(v.words)*8))
		f.covered = max(f.covered, staged)
		return nil
	}
	if err := failpoint.Hit(failpoint.BitsliceSyncHeader); err != nil {
		// Tested by TestFaultSyncLagged under -tags kvbuf_failpoints.
		return kverr.Errorf("%s: sync: %w", f.path, err)
	}
	h := header{seq: f.seq + 1, nbits: v.nbits, watermark: wm, owner: owner, gen: gen}
	b := encodeSlot(h)
	// Untested errors: see writeHeader.
	if _, err := f.fd.WriteAt(b[:], int64(slotFor(h.seq))*slotStride); err != nil {
		return kverr.Errorf("%s: sync: write header slot %d: %w", f.path, slotFor(h.seq), err)
	}
	_ = failpoint.Hit(failpoint.BitsliceSyncHeaderWritten) // a crash point only
	if err := unix.Fdatasync(int(f.fd.Fd())); err != nil {
		// Untested: fdatasync fails only on an I/O error. The slot may
		// reach the disk or not; its claims hold either way, and the
		// retry writes the same slot again (the other one keeps the
		// previous header, as for a failed Sync).
		return kverr.Errorf("%s: sync: fdatasync: %w", f.path, err)
	}
	// fdatasync writes back the pages dirtied through the mapping too.
	failpoint.FileSynced(f.fd, 0, -1)
	f.synced(h, staged)
	return nil
}

// synced records header h as the one in force after Sync or SyncLagged made
// it durable, with every change staged up to covered durable too.
func (f *File) synced(h header, covered uint64) {
	f.seq, f.valid, f.version = h.seq, 2, Version
	f.persisted.Store(h.watermark)
	f.covered = max(f.covered, covered)
	f.owner.Store(h.owner)
	f.gen.Store(h.gen)
	_ = failpoint.Hit(failpoint.BitsliceSyncDone) // a crash point only
}

// Close releases the lock and the descriptor, and drops the File's
// references to its mappings: each is unmapped by a runtime cleanup once no
// View of it is reachable, so a reader that loaded a View before Close reads
// the file's words through it, whatever Close does meanwhile. It waits for
// in-flight Set/Apply/ApplyWords calls but does not sync: call Sync first for
// durability. Close is idempotent; later calls return nil, every other
// method then fails with kvbuf.ErrClosed (or reads as empty).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.wmu.Lock()
	f.cur.Store(nil)
	f.wmu.Unlock()
	// The lock is released explicitly: it belongs to the open file
	// description, which a mapping still in place keeps open after the
	// descriptor's close, so without LOCK_UN the file would stay locked
	// until the garbage collector unmapped the last mapping.
	// Untested errors: LOCK_UN of a lock we hold fails only with EINTR or
	// ENOLCK, and close of a regular file only on an I/O error reported
	// late (NFS and the like).
	var errs []error
	if err := unix.Flock(int(f.fd.Fd()), unix.LOCK_UN); err != nil {
		errs = append(errs, kverr.Errorf("unlock: %w", err))
	}
	f.regions, f.reg = nil, nil
	if err := f.fd.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return kverr.Errorf("close %s: %w", f.path, err)
	}
	return nil
}

// syncDir fsyncs a directory so a new entry in it is durable.
func syncDir(dir string) error {
	if err := fsutil.SyncDir(dir); err != nil {
		return kverr.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

func (f *File) errClosed() error { return kverr.Errorf("%s: %w", f.path, kverr.ErrClosed) }
