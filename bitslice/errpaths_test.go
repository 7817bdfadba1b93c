package bitslice

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Error paths and fallbacks that the round-trip tests do not reach: a file
// size limit (the stand-in for a full disk) during Create and Grow,
// non-regular files, relative paths, and the helpers behind the Linux
// fast paths (written zeros, hard-link publish).

// withFileSizeLimit runs fn with the soft RLIMIT_FSIZE of the process set to
// limit bytes: the kernel then fails any write or fallocate past limit with
// EFBIG (and sends SIGXFSZ, which the Go runtime ignores unless it is
// notified). The limit is process-wide, so the test must not be parallel.
func withFileSizeLimit(t *testing.T, limit uint64, fn func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if old.Cur != unix.RLIM_INFINITY && old.Cur < limit {
		t.Skipf("RLIMIT_FSIZE is already %d bytes", old.Cur)
	}
	lim := old
	lim.Cur = limit
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("cannot lower RLIMIT_FSIZE: %v", err)
	}
	defer func() {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
			t.Fatalf("restore RLIMIT_FSIZE: %v", err)
		}
	}()
	fn()
}

// A Create that cannot allocate its data area fails with the allocation
// error and leaves nothing behind, not even the temporary file.
func TestCreateAllocateFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.bits")
	withFileSizeLimit(t, 1<<20, func() {
		_, err := Create(path, 8<<23) // an 8 MiB data area
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("Create past RLIMIT_FSIZE: %v, want EFBIG", err)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "allocate") {
			t.Fatalf("error %q does not name the path and the allocation", msg)
		}
	})
	assertOnlyFiles(t, dir)
}

// A Grow that cannot allocate fails with the allocation error and changes
// nothing: not the length, not the file (size or bytes), not the header.
// Once space is back the same Grow succeeds.
func TestGrowAllocateFails(t *testing.T) {
	f := create(t, 1000)
	if err := f.Set(999, true); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(7)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before, info := readFile(t, f.Path()), f.Info()
	const nbits = 8 << 23 // an 8 MiB data area
	withFileSizeLimit(t, 1<<20, func() {
		err := f.Grow(nbits)
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("Grow past RLIMIT_FSIZE: %v, want EFBIG", err)
		}
		if msg := err.Error(); !strings.Contains(msg, f.Path()) || !strings.Contains(msg, "allocate") {
			t.Fatalf("error %q does not name the path and the allocation", msg)
		}
	})
	if got := f.Len(); got != 1000 {
		t.Fatalf("Len after failed Grow = %d, want 1000", got)
	}
	if got := f.Info(); got != info {
		t.Fatalf("Info after failed Grow = %+v, want %+v", got, info)
	}
	if !bytes.Equal(readFile(t, f.Path()), before) {
		t.Fatal("failed Grow changed the file")
	}
	if err := f.Set(nbits-1, true); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Fatalf("Set past the old length after failed Grow: %v, want ErrOutOfRange", err)
	}
	if err := f.Grow(nbits); err != nil {
		t.Fatalf("Grow once the limit is lifted: %v", err)
	}
	g := reopen(t, f)
	if g.Len() != nbits || !g.Get(999) || g.Watermark() != 7 || g.CountOnes() != 1 {
		t.Fatalf("after Grow and reopen: Len %d, bit 999 %v, watermark %d, ones %d; want %d, true, 7, 1",
			g.Len(), g.Get(999), g.Watermark(), g.CountOnes(), uint64(nbits))
	}
}

// Open and ReadInfo refuse anything that is not a regular file before
// reading it as a header.
func TestOpenNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// O_RDWR opens a FIFO without waiting for a peer.
	f, err := Open(fifo)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, kverr.ErrCorruptBits) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Open of a FIFO: %v, want ErrCorrupt (not a regular file)", err)
	}
	// ReadInfo opens read-only, which would block on a FIFO: use a device.
	if _, err := os.Stat(os.DevNull); err != nil {
		t.Skip(err)
	}
	if _, err := ReadInfo(os.DevNull); !errors.Is(err, kverr.ErrCorruptBits) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("ReadInfo(%s): %v, want ErrCorrupt (not a regular file)", os.DevNull, err)
	}
}

// A path without a directory is created in the working directory, and the
// temporary file goes there too.
func TestCreateRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	f, err := Create("rel.bits", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Path() != "rel.bits" {
		t.Fatalf("Path = %q, want rel.bits", f.Path())
	}
	assertOnlyFiles(t, dir, "rel.bits")
	info, err := ReadInfo(filepath.Join(dir, "rel.bits"))
	if err != nil || info.Len != 100 {
		t.Fatalf("ReadInfo of the created file: %+v, %v; want Len 100", info, err)
	}
}

// writeZeros is the allocation fallback where fallocate is unsupported: it
// must zero exactly [off, off+n), across chunk boundaries, extending the
// file when the range runs past its end.
func TestWriteZeros(t *testing.T) {
	path := filepath.Join(t.TempDir(), "z")
	const size = 200 << 10 // spans several 64 KiB chunks
	writeFile(t, path, bytes.Repeat([]byte{0xff}, size))
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	const off, n = 100, 150_000
	if err := writeZeros(fd, off, n); err != nil {
		t.Fatal(err)
	}
	if err := writeZeros(fd, size-10, 30); err != nil { // past the end
		t.Fatal(err)
	}
	got := readFile(t, path)
	if len(got) != size+20 {
		t.Fatalf("file is %d bytes, want %d", len(got), size+20)
	}
	for i, c := range got {
		zero := (i >= off && i < off+n) || i >= size-10
		if zero != (c == 0) {
			t.Fatalf("byte %d = %#x after writeZeros(%d, %d) and (%d, 30)", i, c, off, n, size-10)
		}
	}
}

// writeZeros reports a failed write with its offset and does not pretend
// the range is allocated.
func TestWriteZerosFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "z")
	writeFile(t, path, []byte("data"))
	fd, err := os.Open(path) // read-only: every write fails
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	err = writeZeros(fd, 2, 10)
	if !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), "write zeros at 2") {
		t.Fatalf("writeZeros on a read-only descriptor: %v, want EBADF at offset 2", err)
	}
	if got := readFile(t, path); string(got) != "data" {
		t.Fatalf("file is %q after a failed writeZeros, want %q", got, "data")
	}
}

// Empty ranges allocate nothing and leave the file as it is.
func TestAllocateEmptyRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a")
	writeFile(t, path, []byte("data"))
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	for _, n := range []int64{0, -1} {
		if err := allocate(fd, 1<<20, n); err != nil {
			t.Fatalf("allocate(%d bytes at 1 MiB): %v", n, err)
		}
	}
	if err := fillHoles(fd, 0); err != nil {
		t.Fatalf("fillHoles(0): %v", err)
	}
	if got := readFile(t, path); string(got) != "data" {
		t.Fatalf("file is %q after empty allocations, want %q", got, "data")
	}
}

// countOnes reads the data area through the descriptor; a file shorter
// than the length it is given (one truncated after validation) is an error
// naming the words it could not read, not a short count.
func TestCountOnesShortFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "short")
	img := make([]byte, DataOffset+8)
	img[DataOffset] = 0xff
	writeFile(t, path, img)
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if n, err := countOnes(fd, 64); err != nil || n != 8 {
		t.Fatalf("countOnes(64 bits) = %d, %v; want 8, nil", n, err)
	}
	_, err = countOnes(fd, 128)
	if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "read data words 0..2") {
		t.Fatalf("countOnes past the end: %v, want io.EOF reading words 0..2", err)
	}
}

func TestSyncDirMissing(t *testing.T) {
	if err := syncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("syncDir of a missing directory: %v, want fs.ErrNotExist", err)
	}
}

func TestMappingSizeHuge(t *testing.T) {
	if _, err := mappingSize(math.MaxInt64); err == nil {
		t.Fatal("mappingSize(MaxInt64) succeeded")
	}
	if n, err := mappingSize(minMapping + 1); err != nil || n != 2*minMapping {
		t.Fatalf("mappingSize(minMapping+1) = %d, %v", n, err)
	}
}
