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

// TestProcessDiskWrites checks that ProcessDiskWrites counts the three ways
// the benchmarks' rows reach the disk, at least the bytes each wrote: a
// pwrite made durable with fdatasync (bitslice's pwrite path, pebble's
// WAL), stores into a shared mapping made durable with msync (a bitslice
// File's ApplyWords and Sync), and the writes of pebble's own goroutines
// (a memtable flushed to an sstable by pebble's flush goroutine, no WAL).
// It is skipped where the count does not exist or a pwrite does not move
// it (a file system that keeps no count, such as tmpfs).
func TestProcessDiskWrites(t *testing.T) {
	dir := t.TempDir()
	written := func(f func()) int64 {
		t.Helper()
		w0, ok := ProcessDiskWrites()
		if !ok {
			t.Skip("no /proc/self/io write count on this system")
		}
		f()
		w1, _ := ProcessDiskWrites()
		return w1 - w0
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
