package workload

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/storage"
)

// diskProbe is how many bytes each way of writing in TestProcessDiskWrites
// writes.
const diskProbe = 8 << 20

// TestProcessDiskWrites checks that the count ProcessDiskWrites reads
// (write_bytes) grows, for each of the three ways the benchmarks' rows
// reach the disk, by at least the bytes written: a pwrite made durable
// with fdatasync (bitslice's pwrite path, pebble's WAL), stores into a
// shared mapping made durable with msync (a bitslice File's ApplyWords
// and Sync), and the writes of pebble's own goroutines (a memtable flushed
// to an sstable by pebble's flush goroutine, no WAL). It reads
// write_bytes alone: pages of files an earlier test removed before they
// were written back can be cancelled meanwhile (cancelled_write_bytes),
// which ProcessDiskWrites subtracts (TestDiskWritesOf). It is skipped where
// the count does not exist or a pwrite does not move it (a file system
// that keeps no count, such as tmpfs).
func TestProcessDiskWrites(t *testing.T) {
	dir := t.TempDir()
	if _, ok := ProcessDiskWrites(); !ok {
		t.Skip("no /proc/self/io write count on this system")
	}
	count := func() int64 {
		t.Helper()
		b, err := os.ReadFile("/proc/self/io")
		if err != nil {
			t.Fatal(err)
		}
		n, ok := ioField(b, "write_bytes")
		if !ok {
			t.Fatalf("no write_bytes in %q", b)
		}
		return n
	}
	written := func(f func()) int64 {
		t.Helper()
		w0 := count()
		f()
		return count() - w0
	}
	data := make([]byte, diskProbe)
	if _, err := rand.Read(data); err != nil { // incompressible: pebble's sstable holds every byte
		t.Fatal(err)
	}

	fd, err := os.OpenFile(filepath.Join(dir, "pwrite"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	n := written(func() {
		if _, err := fd.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := fd.Sync(); err != nil {
			t.Fatal(err)
		}
	})
	if n == 0 {
		t.Skipf("a synced pwrite of %d bytes did not move write_bytes: no count on this file system", diskProbe)
	}
	if n < diskProbe {
		t.Errorf("pwrite+fsync of %d bytes: counted %d", diskProbe, n)
	}

	bf, err := bitslice.Create(filepath.Join(dir, "bits"), diskProbe*8)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	var words []bitslice.WordChange
	for w := uint64(0); w < diskProbe/8; w += pageWords { // one word in every page: every page dirty
		words = append(words, bitslice.WordChange{Word: w, Mask: 1, Bits: 1})
	}
	n = written(func() {
		if err := bf.ApplyWords(words); err != nil {
			t.Fatal(err)
		}
		if err := bf.Sync(); err != nil {
			t.Fatal(err)
		}
	})
	if n < diskProbe {
		t.Errorf("stores into every page of a %d-byte mapping, then msync: counted %d", diskProbe, n)
	}

	po := storage.PebbleOptions(nil) // the store's options (its quiet logger)
	po.DisableWAL = true
	pdb, err := pebble.Open(filepath.Join(dir, "pebble"), po)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	n = written(func() {
		const vlen = 4096
		for i := 0; i < diskProbe; i += vlen {
			if err := pdb.Set(binary.BigEndian.AppendUint64(nil, uint64(i)), data[i:i+vlen], pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := pdb.Flush(); err != nil { // pebble's flush goroutine writes the sstable
			t.Fatal(err)
		}
	})
	if n < diskProbe {
		t.Errorf("pebble without a WAL, %d bytes of values flushed to an sstable: counted %d", diskProbe, n)
	}
}

// TestDiskWritesOf: the count is write_bytes minus cancelled_write_bytes;
// a text without either is no count.
func TestDiskWritesOf(t *testing.T) {
	io := "rchar: 6976\nwchar: 4096\nsyscr: 10\nsyscw: 1\nread_bytes: 512\nwrite_bytes: 1048576\ncancelled_write_bytes: 4096\n"
	if n, ok := diskWritesOf([]byte(io)); !ok || n != 1048576-4096 {
		t.Errorf("diskWritesOf: %d, %t; want %d", n, ok, 1048576-4096)
	}
	for _, bad := range []string{"", "write_bytes: 10\n", "cancelled_write_bytes: 0\n", "write_bytes: x\ncancelled_write_bytes: 0\n"} {
		if n, ok := diskWritesOf([]byte(bad)); ok {
			t.Errorf("diskWritesOf(%q) = %d, true; want no count", bad, n)
		}
	}
}
