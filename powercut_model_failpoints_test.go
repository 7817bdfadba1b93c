//go:build kvbuf_failpoints

package kvbuf

// The power-cut model of the OS file system (go test -tags
// kvbuf_failpoints): what a cut keeps of the files the engine keeps outside
// its store (bitslices, memory-mapped, so they cannot go through pebble's
// vfs; the manifest; the lock; a checkpoint's copies).
//
// The instrumented code reports every successful sync (failpoint.FileSynced
// after an fsync, fdatasync or msync of a range; failpoint.DirSynced after a
// directory fsync). The model records, per file (inode), the content each
// sync made durable, read back at that moment, and per directory the
// entries its last fsync made durable. A cut builds an image:
//
//   - each directory holds, per name, the entry its last fsync recorded or
//     the current one, at random where they differ (a rename or creation
//     not yet synced may or may not have reached the disk);
//   - each file is its synced content, plus, per 4 KiB page that differs
//     from it now, the page as it is now or as it was synced, at random
//     (mode "pages": the kernel writes back some dirty pages and not
//     others); in mode "torn" a page may also reach the disk in part, as a
//     random subset of its 512-byte sectors (a page torn by the cut);
//   - a file's size is its synced size, or its size now (at random, where
//     they differ; an extension is metadata the journal may or may not
//     hold).
//
// The store is on pebble's crashable MemFS, cut by CrashClone (what pebble
// synced, plus a random share of what it did not). A cut holds the model's
// lock, which every sync report takes, while it clones the store and reads
// the OS files: no sync completes (for the program) between the store's
// image and the files', so the two are of one instant.
//
// Approximations: a directory's listing is read just after its fsync, so an
// entry created meanwhile counts as synced (the engine creates bitslices
// one at a time, under its lock, and syncs the directory after each); the
// content of a file with no name left is its synced content only. A cut
// does not stop the engine: a file renamed while the cut reads (a
// bitslice's creation publishing its temporary file) is read by its inode
// wherever it is now, never as the empty content of a name it left.

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

const (
	pcPage   = 4096
	pcSector = 512
)

// pcModel is the power-cut model of the OS files under root.
type pcModel struct {
	root string
	mem  *testutil.CrashableMem // the store's file system

	mu    sync.Mutex                    // sync reports and cuts
	files map[uint64][]byte             // inode -> content synced (its length is the synced size)
	dirs  map[string]map[string]pcEntry // directory -> entries synced

	afterWalk func() // a test's hook: runs in cut between the walk and the listings
}

type pcEntry struct {
	ino uint64
	dir bool
}

func newPCModel(root string, mem *testutil.CrashableMem) *pcModel {
	m := &pcModel{root: filepath.Clean(root), mem: mem, files: map[uint64][]byte{}, dirs: map[string]map[string]pcEntry{}}
	// The root exists, empty, durably: the test made it.
	m.dirs[m.root] = map[string]pcEntry{}
	return m
}

func (m *pcModel) under(path string) bool {
	path = filepath.Clean(path)
	return path == m.root || strings.HasPrefix(path, m.root+string(filepath.Separator))
}

func inodeOf(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

// FileSynced implements failpoint.SyncObserver.
func (m *pcModel) FileSynced(f *os.File, off, n int64) {
	if !m.under(f.Name()) {
		return
	}
	fi, err := f.Stat()
	if err != nil {
		panic(fmt.Sprintf("power-cut model: stat %s: %v", f.Name(), err))
	}
	// Read through the descriptor (f may be open for writing only).
	cur, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		panic(fmt.Sprintf("power-cut model: read %s: %v", f.Name(), err))
	}
	ino := inodeOf(fi)
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		m.files[ino] = cur
		return
	}
	syn := m.files[ino]
	end := min(off+n, int64(len(cur)))
	if int64(len(syn)) < end {
		// A range synced past the synced size: its bytes are durable,
		// but not the size (a range sync is not a metadata sync). Keep
		// them; the size is decided at the cut.
		syn = append(syn, make([]byte, end-int64(len(syn)))...)
	}
	if off < end {
		copy(syn[off:end], cur[off:end])
	}
	m.files[ino] = syn
}

// DirSynced implements failpoint.SyncObserver.
func (m *pcModel) DirSynced(dir string) {
	if !m.under(dir) {
		return
	}
	ents, err := pcListing(dir)
	if err != nil {
		panic(fmt.Sprintf("power-cut model: list %s: %v", dir, err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs[filepath.Clean(dir)] = ents
}

func pcListing(dir string) (map[string]pcEntry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]pcEntry{}
	for _, de := range des {
		fi, err := os.Lstat(filepath.Join(dir, de.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		out[de.Name()] = pcEntry{ino: inodeOf(fi), dir: fi.IsDir()}
	}
	return out, nil
}

// pcImage is what a power cut leaves: the store's file system and the OS
// files (paths relative to the root).
type pcImage struct {
	store *vfs.MemFS
	dirs  []string
	files map[string][]byte
}

// pcCutMode says how a cut treats what was not synced.
type pcCutMode struct {
	torn     bool // pages may reach the disk torn at 512-byte boundaries
	unsynced int  // the store's CrashClone UnsyncedDataPercent
}

func (c pcCutMode) String() string {
	mode := "pages"
	if c.torn {
		mode = "torn"
	}
	return fmt.Sprintf("%s/store-unsynced-%d%%", mode, c.unsynced)
}

// cut takes a power cut now. The caller holds no lock of the model.
func (m *pcModel) cut(rng *rand.Rand, mode pcCutMode) *pcImage {
	m.mu.Lock()
	defer m.mu.Unlock()
	img := &pcImage{files: map[string][]byte{}}
	img.store = m.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: mode.unsynced, RNG: rng})
	paths := map[uint64]string{} // inode -> a current path
	_ = filepath.WalkDir(m.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := os.Lstat(p); err == nil {
				paths[inodeOf(fi)] = p
			}
		}
		return nil
	})
	if m.afterWalk != nil {
		m.afterWalk()
	}
	m.cutDir(img, m.root, rng, mode, paths)
	return img
}

func (m *pcModel) cutDir(img *pcImage, dir string, rng *rand.Rand, mode pcCutMode, paths map[uint64]string) {
	synced := m.dirs[dir] // nil: never synced
	cur, _ := pcListing(dir)
	var names []string
	for n := range synced {
		names = append(names, n)
	}
	for n := range cur {
		if _, ok := synced[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		s, sok := synced[name]
		c, cok := cur[name]

		e, ok := c, cok
		if !(sok && cok && s == c) && rng.IntN(2) == 0 {
			e, ok = s, sok
		}
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		rel, _ := filepath.Rel(m.root, path)
		if e.dir {
			img.dirs = append(img.dirs, rel)
			m.cutDir(img, path, rng, mode, paths)
			continue
		}
		hint := paths[e.ino]
		if cok && c.ino == e.ino {
			hint = path // just listed: the likelier path now
		}
		img.files[rel] = m.cutFile(e.ino, hint, rng, mode)
	}
}

// readIno reads the file with inode ino now: at path if the file there is
// still that inode, else wherever under the root it is now (a cut does not
// stop the engine, so a file can be renamed, or replaced by a rename over
// it, after the cut's walk). ok is false if it has no name left.
func (m *pcModel) readIno(ino uint64, path string) (b []byte, ok bool) {
	read := func(p string) ([]byte, bool) {
		f, err := os.Open(p)
		if err != nil {
			return nil, false
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || inodeOf(fi) != ino {
			return nil, false
		}
		b, err := io.ReadAll(f)
		return b, err == nil
	}
	if path != "" {
		if b, ok := read(path); ok {
			return b, true
		}
	}
	found := ""
	_ = filepath.WalkDir(m.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := os.Lstat(p); err == nil && inodeOf(fi) == ino {
				found = p
				return filepath.SkipAll
			}
		}
		return nil
	})
	if found == "" {
		return nil, false
	}
	return read(found)
}

// cutFile is what a cut leaves of the file with inode ino (at path when
// the cut looked, "" if it had no name then; see readIno).
func (m *pcModel) cutFile(ino uint64, path string, rng *rand.Rand, mode pcCutMode) []byte {
	syn := m.files[ino]
	cur, ok := m.readIno(ino, path)
	if !ok {
		cur = syn // no name left: its synced content only
	}
	size := len(syn)
	if len(cur) != size && rng.IntN(2) == 0 {
		size = len(cur)
	}
	out := make([]byte, size)
	copy(out, syn)
	for p := 0; p < size; p += pcPage {
		end := min(p+pcPage, size)
		newPage := make([]byte, end-p)
		if p < len(cur) {
			copy(newPage, cur[p:min(end, len(cur))])
		}
		if bytes.Equal(out[p:end], newPage) {
			continue
		}
		k := rng.IntN(2) // 0: not written back, 1: written whole
		if mode.torn {
			k = rng.IntN(3) // 2: torn
		}
		switch k {
		case 1:
			copy(out[p:end], newPage)
		case 2:
			for s := p; s < end; s += pcSector {
				if rng.IntN(2) == 0 {
					copy(out[s:min(s+pcSector, end)], newPage[s-p:min(s+pcSector, end)-p])
				}
			}
		}
	}
	return out
}

// materialize writes img's OS files under root (which must be empty) and
// returns the store's file system.
func (img *pcImage) materialize(root string) (vfs.FS, error) {
	for _, d := range img.dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	for rel, b := range img.files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
	}
	return img.store, nil
}

// emptyDir removes everything in dir.
func emptyDir(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}

// TestPCModelRenameDuringCut: a cut does not stop the engine, so a file
// can be renamed between the cut's walk (which maps inodes to paths) and
// its directory listings: here bitslice.CreateOwned publishes its
// temporary file meanwhile. Whichever entry the image keeps, a file in
// it is a whole bitslice: its content was fsynced before the rename. The
// model once read the renamed file at its old path, got nothing, and
// could leave a 0-byte x.bits (TestCrashPowerCut's "file is 0 bytes,
// shorter than the 4096-byte header" for a bitslice being created).
func TestPCModelRenameDuringCut(t *testing.T) {
	for seed := range uint64(32) {
		root := t.TempDir()
		m := newPCModel(root, testutil.NewCrashableMem())
		stop := failpoint.Observe(m)
		walked, renamed := make(chan struct{}), make(chan struct{})
		m.afterWalk = func() { close(walked); <-renamed }
		var (
			img *pcImage
			wg  sync.WaitGroup
		)
		offPublish := failpoint.Enable(failpoint.BitsliceCreatePublish, func() error {
			wg.Go(func() { img = m.cut(rand.New(rand.NewPCG(seed, 0)), pcCutMode{}) })
			<-walked
			return nil
		})
		offDirSync := failpoint.Enable(failpoint.BitsliceCreateDirSync, func() error { close(renamed); return nil })
		f, err := bitslice.CreateOwned(filepath.Join(root, "x.bits"), 1000, 7)
		wg.Wait()
		offPublish()
		offDirSync()
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		b, ok := img.files["x.bits"]
		if !ok {
			continue // the rename did not reach the disk: nothing to check
		}
		p := filepath.Join(t.TempDir(), "x.bits")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := bitslice.Open(p)
		if err != nil {
			t.Fatalf("seed %d: the cut left x.bits (%d bytes) that does not open: %v", seed, len(b), err)
		}
		if g.Len() != 1000 || g.Owner() != 7 {
			t.Fatalf("seed %d: the cut left x.bits of %d bits, owner %d; want 1000, 7", seed, g.Len(), g.Owner())
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
