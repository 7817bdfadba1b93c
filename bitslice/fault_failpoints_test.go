//go:build kvbuf_failpoints

package bitslice

// Fault tests through the bitslice failpoints (go test -tags
// kvbuf_failpoints ./bitslice): an injected error fails Sync or Grow with
// that error, the file on disk and the File's state stay as they were, and
// the same call succeeds once the fault is gone. The failpoint table is
// process-wide: these tests must not be parallel.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// faultFile makes a file with one bit set and watermark 1 synced, then a
// second bit set and watermark 2 staged, and returns it with its bytes on
// disk.
func faultFile(t *testing.T) (*File, []byte) {
	t.Helper()
	f := create(t, 1000)
	if err := f.Set(3, true); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(1)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(900, true); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(2)
	return f, readFile(t, f.Path())
}

// inject enables point with a callback failing with want, counting calls.
// It returns the count and the function removing the fault (also run at
// cleanup).
func inject(t *testing.T, point string, want error) (calls *int, disable func()) {
	t.Helper()
	calls = new(int)
	disable = failpoint.Enable(point, func() error { *calls++; return want })
	t.Cleanup(disable)
	return calls, disable
}

func TestFaultSync(t *testing.T) {
	for _, point := range []string{failpoint.BitsliceSyncMsync, failpoint.BitsliceSyncHeader} {
		t.Run(point, func(t *testing.T) {
			f, before := faultFile(t)
			info := f.Info()
			calls, disable := inject(t, point, syscall.EIO)
			err := f.Sync()
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), f.Path()) || !strings.Contains(err.Error(), "sync") {
				t.Fatalf("Sync with %s failing: %v, want EIO naming the path and sync", point, err)
			}
			if *calls != 1 {
				t.Fatalf("failpoint ran %d times, want 1", *calls)
			}
			if f.Watermark() != 1 || f.Info() != info {
				t.Fatalf("after failed Sync: watermark %d, info %+v; want 1, %+v", f.Watermark(), f.Info(), info)
			}
			// The header area is what a failed Sync must not touch; data
			// pages may reach the disk through writeback at any time.
			if after := readFile(t, f.Path()); !bytes.Equal(after[:DataOffset], before[:DataOffset]) {
				t.Fatal("failed Sync changed the header area")
			}
			disable()
			if err := f.Sync(); err != nil {
				t.Fatalf("Sync after the fault is gone: %v", err)
			}
			g := reopen(t, f)
			if g.Watermark() != 2 || !g.Get(3) || !g.Get(900) {
				t.Fatalf("after retry and reopen: watermark %d, bits 3, 900 = %v, %v; want 2, true, true",
					g.Watermark(), g.Get(3), g.Get(900))
			}
		})
	}
}

func TestFaultGrow(t *testing.T) {
	cases := []struct {
		point string
		want  error
	}{
		{failpoint.BitsliceGrowAllocate, syscall.ENOSPC},
		{failpoint.BitsliceGrowHeader, syscall.EIO},
	}
	const nbits = 1 << 20 // needs a larger file (and mapping) than 1000 bits
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			f, before := faultFile(t)
			info := f.Info()
			calls, disable := inject(t, c.point, c.want)
			err := f.Grow(nbits)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), f.Path()) || !strings.Contains(err.Error(), "grow") {
				t.Fatalf("Grow with %s failing: %v, want %v naming the path and grow", c.point, err, c.want)
			}
			if *calls != 1 {
				t.Fatalf("failpoint ran %d times, want 1", *calls)
			}
			after := readFile(t, f.Path())
			if !bytes.Equal(after[:DataOffset], before[:DataOffset]) {
				t.Fatal("failed Grow changed the header area")
			}
			switch c.point {
			case failpoint.BitsliceGrowAllocate:
				if len(after) != len(before) {
					t.Fatalf("Grow failing before allocation changed the file size: %d, want %d", len(after), len(before))
				}
			case failpoint.BitsliceGrowHeader:
				// The file stays extended (zeroed, synced) under the old
				// header, which Open accepts; only the length is unchanged.
				if len(after) != int(dataSize(nbits)) {
					t.Fatalf("Grow failing at the header left a %d-byte file, want %d", len(after), dataSize(nbits))
				}
				info.FileSize = int64(len(after))
			}
			if f.Len() != 1000 || f.Info() != info {
				t.Fatalf("after failed Grow: Len %d, info %+v; want 1000, %+v", f.Len(), f.Info(), info)
			}
			if err := f.Set(nbits-1, true); !errors.Is(err, kverr.ErrOutOfRange) {
				t.Fatalf("Set past the old length after failed Grow: %v, want ErrOutOfRange", err)
			}
			disable()
			if err := f.Grow(nbits); err != nil {
				t.Fatalf("Grow after the fault is gone: %v", err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			g := reopen(t, f)
			if g.Len() != nbits || g.Watermark() != 2 || g.CountOnes() != 2 {
				t.Fatalf("after retry and reopen: Len %d, watermark %d, ones %d; want %d, 2, 2",
					g.Len(), g.Watermark(), g.CountOnes(), nbits)
			}
		})
	}
}

// The ApplyWords point is a crash point: an error there is ignored (the
// input was validated before the first store), so every change lands.
func TestFaultApplyWordsIgnoresError(t *testing.T) {
	f := create(t, 256)
	calls, _ := inject(t, failpoint.BitsliceApplyWords, syscall.EIO)
	changes := []WordChange{{0, 1, 1}, {1, 2, 2}, {2, 4, 4}, {3, 8, 8}}
	if err := f.ApplyWords(changes); err != nil {
		t.Fatalf("ApplyWords with its crash point failing: %v, want nil", err)
	}
	if *calls != 1 {
		t.Fatalf("failpoint ran %d times, want 1", *calls)
	}
	for _, c := range changes {
		if got := f.Word(c.Word); got != c.Bits {
			t.Fatalf("word %d = %#x, want %#x", c.Word, got, c.Bits)
		}
	}
}

// A failed pwrite in WriteWords (its second half's, after the first half
// was written) returns the error naming the path, leaves the words before
// it written and the header untouched, and the same call succeeds once the
// fault is gone.
func TestFaultWriteWords(t *testing.T) {
	f, _ := faultFile(t) // watermark 1 synced, 2 staged
	info := f.Info()
	words := []uint64{1, 2, 4, 8}
	calls, disable := inject(t, failpoint.BitsliceWriteWords, syscall.EIO)
	err := f.WriteWords(4, words)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), f.Path()) {
		t.Fatalf("WriteWords with its pwrite failing: %v, want EIO naming the path", err)
	}
	if *calls != 1 {
		t.Fatalf("failpoint ran %d times, want 1", *calls)
	}
	for k, w := range words {
		want := w
		if k >= len(words)/2 {
			want = 0 // not written: the pwrite of the second half failed
		}
		if got := f.Word(uint64(4 + k)); got != want {
			t.Fatalf("after the failed WriteWords: word %d = %#x, want %#x", 4+k, got, want)
		}
	}
	got := f.Info()
	got.Ones = info.Ones // the words written count: the header is what must not move
	if got != info {
		t.Fatalf("after the failed WriteWords: info %+v; want %+v", got, info)
	}
	disable()
	if err := f.WriteWords(4, words); err != nil {
		t.Fatalf("WriteWords again after the fault: %v", err)
	}
	for k, w := range words {
		if got := f.Word(uint64(4 + k)); got != w {
			t.Fatalf("after the retry: word %d = %#x, want %#x", 4+k, got, w)
		}
	}
}

func TestFaultSyncLagged(t *testing.T) {
	for _, point := range []string{failpoint.BitsliceSyncMsync, failpoint.BitsliceSyncHeader} {
		t.Run(point, func(t *testing.T) {
			f, before := faultFile(t) // watermark 1 synced, 2 staged
			f.SetGen(7)
			info := f.Info()
			calls, disable := inject(t, point, syscall.EIO)
			err := f.SyncLagged()
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), f.Path()) || !strings.Contains(err.Error(), "sync") {
				t.Fatalf("SyncLagged with %s failing: %v, want EIO naming the path and sync", point, err)
			}
			if *calls != 1 {
				t.Fatalf("failpoint ran %d times, want 1", *calls)
			}
			if f.Info() != info {
				t.Fatalf("after failed SyncLagged: info %+v; want %+v", f.Info(), info)
			}
			if after := readFile(t, f.Path()); !bytes.Equal(after[:DataOffset], before[:DataOffset]) {
				t.Fatal("failed SyncLagged changed the header area")
			}
			disable()
			if err := f.SyncLagged(); err != nil {
				t.Fatalf("SyncLagged after the fault is gone: %v", err)
			}
			g := reopen(t, f)
			// The header records the watermark of the last successful
			// sync's start (1), not the staged one (2).
			if g.Watermark() != 1 || g.Gen() != 7 || !g.Get(3) || !g.Get(900) {
				t.Fatalf("after retry and reopen: watermark %d gen %d, bits 3, 900 = %v, %v; want 1, 7, true, true",
					g.Watermark(), g.Gen(), g.Get(3), g.Get(900))
			}
		})
	}
}

// syncedImage records, through the sync observer, what the syncs of the
// one file in path's directory made durable (the file as read at each
// sync; ranges merged).
type syncedImage struct {
	path string
	img  []byte
}

func (s *syncedImage) FileSynced(f *os.File, off, n int64) {
	if filepath.Dir(f.Name()) != filepath.Dir(s.path) {
		return // f.Name() may be the name Create used before the rename
	}
	cur, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		panic(err)
	}
	if n < 0 {
		s.img = cur
		return
	}
	if int64(len(s.img)) < off+n {
		s.img = append(s.img, make([]byte, off+n-int64(len(s.img)))...)
	}
	copy(s.img[off:off+n], cur[off:off+n])
}

func (*syncedImage) DirSynced(string) {}

// A power cut between SyncLagged's header write and its fdatasync may keep
// the new header and none of the data written since the previous sync: the
// header's watermark must still be covered by the data (rule L1), and the
// file must open. Each round sets bit k, stages watermark k and syncs; at
// the cut point the image is the data as last synced under the header
// area as it is now.
func TestSyncLaggedCutKeepsHeaderOnly(t *testing.T) {
	f := create(t, 1<<12)
	obs := &syncedImage{path: f.Path()}
	t.Cleanup(failpoint.Observe(obs))
	if err := f.Sync(); err != nil { // a first synced image
		t.Fatal(err)
	}
	obs.img = readFile(t, f.Path())
	var cuts int
	t.Cleanup(failpoint.Enable(failpoint.BitsliceSyncHeaderWritten, func() error {
		cuts++
		img := slices.Clone(obs.img)
		now := readFile(t, f.Path())
		copy(img[:DataOffset], now[:DataOffset])
		path := filepath.Join(t.TempDir(), "cut.bits")
		writeFile(t, path, img)
		g, err := Open(path)
		if err != nil {
			t.Errorf("cut %d: open: %v", cuts, err)
			return nil
		}
		defer g.Close()
		for k := uint64(1); k <= g.Watermark(); k++ {
			if !g.Get(k) {
				t.Errorf("cut %d: header watermark %d is ahead of the data: bit %d not set", cuts, g.Watermark(), k)
				break
			}
		}
		return nil
	}))
	for k := uint64(1); k <= 20; k++ {
		if err := f.Set(k, true); err != nil {
			t.Fatal(err)
		}
		f.SetWatermark(k)
		f.SetGen(k)
		if err := f.SyncLagged(); err != nil {
			t.Fatal(err)
		}
	}
	if cuts != 20 {
		t.Fatalf("%d cuts, want 20 (one per header written)", cuts)
	}
}
