package kvbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/storage"
)

// errCase is one error a program can get through the public API: run
// produces it (dir is a fresh temporary directory), is lists every sentinel
// it must match (the one whose text ends the error's first, or after
// ErrCorrupt), text is its exact text ("<dir>" stands for dir), or, with
// prefix set, the start of a text whose tail is another library's (pebble's)
// message.
type errCase struct {
	name   string
	run    func(t *testing.T, dir string) error
	is     []error
	text   string
	prefix bool
}

// checkErrCase runs c and checks errors.Is for every sentinel, the exact
// text, and that the text starts with "kvbuf: " once.
func checkErrCase(t *testing.T, c errCase) {
	t.Helper()
	dir := t.TempDir()
	err := c.run(t, dir)
	if err == nil {
		t.Fatalf("no error, want %q", c.text)
	}
	for _, s := range c.is {
		if !errors.Is(err, s) {
			t.Errorf("errors.Is(%q, %q) = false", err, s)
		}
	}
	want := strings.ReplaceAll(c.text, "<dir>", dir)
	got := err.Error()
	t.Logf("%s", got)
	switch {
	case c.prefix && !strings.HasPrefix(got, want):
		t.Errorf("text\n  %s\nwant it to start with\n  %s", got, want)
	case !c.prefix && got != want:
		t.Errorf("text\n  %s\nwant\n  %s", got, want)
	}
	checkTextRule(t, err, c)
	if !strings.HasPrefix(got, "kvbuf: ") || strings.Contains(got[len("kvbuf: "):], "kvbuf: ") {
		t.Errorf("text %q does not start with \"kvbuf: \" exactly once", got)
	}
}

// errDB opens an engine in dir with opts (FlushInterval -1 unless set) and
// closes it at the end of the test.
func errDB(t *testing.T, dir string, opts *Options) *DB {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = -1
	}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// closedDB returns an engine in dir that is closed, and one of its
// keyspaces and bitslices.
func closedDB(t *testing.T, dir string) (*DB, *KV, *Bits) {
	db := errDB(t, dir, nil)
	k, b := mustKV(t, db, "users"), mustBits(t, db, "seen")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return db, k, b
}

// snapshotGet reads key of keyspace name from a new snapshot of db.
func snapshotGet(db *DB, name, key string) error {
	s, err := db.NewSnapshot()
	if err != nil {
		return err
	}
	defer s.Close()
	sk, err := s.KV(name)
	if err != nil {
		return err
	}
	_, err = sk.Get([]byte(key))
	return err
}

// withEngine makes an engine in dir with a keyspace "users" holding
// key "a" and a bitslice "seen", durable, and closes it.
func withEngine(t *testing.T, dir string) {
	db := errDB(t, dir, nil)
	mustPut(t, mustKV(t, db, "users"), "a", "1", 1)
	mustSet(t, mustBits(t, db, "seen"), 3, true, 2)
	mustFlush(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestErrorTexts drives every sentinel of errors.go through the public API
// (storage's for the four only package storage returns) and checks
// errors.Is and the exact text. ErrPanicked needs a failpoint: see
// TestErrorTextsFailpoints (go test -tags kvbuf_failpoints);
// ErrBatchTooLarge a 4 GiB batch: see storage's TestBatchTooLarge.
func TestErrorTexts(t *testing.T) {
	ctx := context.Background()
	cases := []errCase{
		// ErrClosed: every layer's "closed" is the one sentinel, bare.
		{"closed/put", func(t *testing.T, dir string) error {
			_, k, _ := closedDB(t, dir)
			return k.Put(ctx, []byte("a"), []byte("1"), 0)
		}, []error{ErrClosed}, "kvbuf: closed", false},
		{"closed/get", func(t *testing.T, dir string) error {
			_, k, _ := closedDB(t, dir)
			_, err := k.Get([]byte("a"))
			return err
		}, []error{ErrClosed}, "kvbuf: closed", false},
		{"closed/set", func(t *testing.T, dir string) error {
			_, _, b := closedDB(t, dir)
			return b.Set(ctx, 1, true, 0)
		}, []error{ErrClosed}, "kvbuf: closed", false},
		{"closed/flush", func(t *testing.T, dir string) error {
			db, _, _ := closedDB(t, dir)
			return db.Flush(ctx)
		}, []error{ErrClosed}, "kvbuf: closed", false},
		{"closed/kv", func(t *testing.T, dir string) error {
			db, _, _ := closedDB(t, dir)
			_, err := db.KV("other")
			return err
		}, []error{ErrClosed}, "kvbuf: closed", false},
		{"closed/snapshot", func(t *testing.T, dir string) error {
			db, _, _ := closedDB(t, dir)
			_, err := db.NewSnapshot()
			return err
		}, []error{ErrClosed}, "kvbuf: closed", false},

		// ErrDiskFull: the text is the cause's.
		{"disk full/flush", func(t *testing.T, dir string) error {
			d := newDiskModel(filepath.Join(dir, "store"))
			db := errDB(t, dir, diskFullOptions(d))
			// Space returns before the cleanup's Close (cleanups run last
			// first): a background compaction whose MANIFEST write found
			// the disk full waits for space, and Close waits for it (the
			// DB doc's caveat on a full disk).
			t.Cleanup(func() { d.full.Store(false) })
			mustPut(t, mustKV(t, db, "users"), "a", "1", 0)
			d.full.Store(true)
			fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			return db.Flush(fctx)
		}, []error{ErrDiskFull, syscall.ENOSPC}, "kvbuf: ", true},

		// ErrNotFound, bare.
		{"not found", func(t *testing.T, dir string) error {
			_, err := mustKV(t, errDB(t, dir, nil), "users").Get([]byte("nope"))
			return err
		}, []error{ErrNotFound}, "kvbuf: not found", false},
		{"not found/snapshot", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			mustKV(t, db, "users")
			return snapshotGet(db, "users", "nope")
		}, []error{ErrNotFound}, "kvbuf: not found", false},

		// ErrLocked.
		{"locked", func(t *testing.T, dir string) error {
			errDB(t, dir, nil)
			_, err := Open(dir, nil)
			return err
		}, []error{ErrLocked}, "kvbuf: lock <dir>/LOCK: locked by another engine", false},

		// ErrNotEngine: foreign, not corrupt.
		{"foreign directory", func(t *testing.T, dir string) error {
			writeFile(t, filepath.Join(dir, "precious.txt"), []byte("x"))
			_, err := Open(dir, nil)
			if errors.Is(err, ErrCorrupt) {
				t.Errorf("a foreign directory matches ErrCorrupt: %v", err)
			}
			return err
		}, []error{ErrNotEngine}, `kvbuf: <dir> has "precious.txt" but no KVBUF: not a kvbuf directory`, false},
		{"foreign manifest", func(t *testing.T, dir string) error {
			writeFile(t, filepath.Join(dir, enginedir.ManifestName), []byte("something else\n"))
			_, err := Open(dir, nil)
			return err
		}, []error{ErrNotEngine}, `kvbuf: <dir>/KVBUF: foreign manifest "something else\n": not a kvbuf directory`, false},

		// Corruption, each kind saying which.
		{"corrupt manifest", func(t *testing.T, dir string) error {
			withEngine(t, dir)
			writeFile(t, filepath.Join(dir, enginedir.ManifestName), []byte("kvbuf engine directory\nformat 3\n"))
			_, err := Open(dir, nil)
			return err
		}, []error{ErrCorrupt, ErrCorruptDir}, `kvbuf: <dir>/KVBUF: unsupported or damaged manifest "kvbuf engine directory\nformat 3\n" (this kvbuf reads formats 1 and 2): corrupt engine directory`, false},
		{"corrupt catalog", func(t *testing.T, dir string) error {
			withEngine(t, dir)
			setMeta(t, dir, enginedir.CatalogMeta, "users 1\nevents 1\n")
			_, err := Open(dir, nil)
			return err
		}, []error{ErrCorrupt, ErrCorruptDir}, `kvbuf: <dir>: keyspace catalog: keyspace catalog line 2 "events 1": id listed twice: corrupt engine directory`, false},
		{"corrupt bitslice file", func(t *testing.T, dir string) error {
			withEngine(t, dir)
			p := filepath.Join(dir, enginedir.BitsDir, "seen"+enginedir.BitsExt)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, p, b[:100])
			_, err = Open(dir, nil)
			if errors.Is(err, ErrCorruptDir) || errors.Is(err, ErrCorruptBlock) {
				t.Errorf("a bitslice file's damage matches another kind: %v", err)
			}
			return err
		}, []error{ErrCorrupt, ErrCorruptBits}, `kvbuf: <dir>/bits/seen.bits: file is 100 bytes, shorter than the 4096-byte header: corrupt bitslice file`, false},
		// A block pebble finds damaged: at Open (the engine's own records
		// share the first block), and while reading. The tail is pebble's
		// message (file number, offsets, checksums).
		{"corrupt store block/open", func(t *testing.T, dir string) error {
			withEngine(t, dir)
			corruptSSTables(t, dir, 0)
			_, err := Open(dir, nil)
			if errors.Is(err, ErrCorruptDir) || errors.Is(err, ErrNotEngine) {
				t.Errorf("a corrupt block matches another kind: %v", err)
			}
			return err
		}, []error{ErrCorrupt, ErrCorruptBlock}, `kvbuf: read watermark in "<dir>/store": corrupt store block: pebble: `, true},
		{"corrupt store block/read", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			k := mustKV(t, db, "users")
			for i := range 2000 {
				mustPut(t, k, fmt.Sprintf("key%05d", i), strings.Repeat("v", 100), 0)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			corruptSSTables(t, dir, 0.5) // a block of user data
			db = errDB(t, dir, nil)
			it, err := mustKV(t, db, "users").NewIter(nil)
			if err != nil {
				return err
			}
			for it.First(); it.Valid(); it.Next() {
			}
			err = it.Close()
			if errors.Is(err, ErrCorruptDir) {
				t.Errorf("a corrupt block matches ErrCorruptDir: %v", err)
			}
			return err
		}, []error{ErrCorrupt, ErrCorruptBlock}, `kvbuf: keyspace "users": iterate in "<dir>/store": corrupt store block: pebble: `, true},

		// Names, options.
		{"bad name/kv", func(t *testing.T, dir string) error {
			_, err := errDB(t, dir, nil).KV("a/b")
			return err
		}, []error{ErrBadName}, `kvbuf: keyspace name "a/b": byte 0x2f: bad keyspace or bitslice name`, false},
		{"bad name/bits", func(t *testing.T, dir string) error {
			_, err := errDB(t, dir, nil).Bits("")
			return err
		}, []error{ErrBadName}, `kvbuf: bitslice name "": bad keyspace or bitslice name`, false},
		{"bad name/drop", func(t *testing.T, dir string) error {
			return errDB(t, dir, nil).DropKV(ctx, "..", 0)
		}, []error{ErrBadName}, `kvbuf: keyspace name "..": bad keyspace or bitslice name`, false},
		{"bad options", func(t *testing.T, dir string) error {
			_, err := Open(dir, &Options{PipelineDepth: -1})
			return err
		}, []error{ErrBadOptions}, fmt.Sprintf("kvbuf: PipelineDepth -1 (want 1..%d, 0 for the default): bad options", flush.MaxPipelineDepth), false},

		// Keys, values, ranges.
		{"empty key", func(t *testing.T, dir string) error {
			return mustKV(t, errDB(t, dir, nil), "users").Put(ctx, nil, []byte("1"), 0)
		}, []error{ErrEmptyKey}, `kvbuf: keyspace "users": empty key`, false},
		{"empty key/get", func(t *testing.T, dir string) error {
			_, err := mustKV(t, errDB(t, dir, nil), "users").Get(nil)
			return err
		}, []error{ErrEmptyKey}, `kvbuf: keyspace "users": empty key`, false},
		{"key too large", func(t *testing.T, dir string) error {
			return mustKV(t, errDB(t, dir, &Options{MaxKeySize: 4}), "users").Put(ctx, []byte("abcde"), nil, 0)
		}, []error{ErrKeyTooLarge}, `kvbuf: keyspace "users": key of 5 bytes (max 4): key too large`, false},
		{"key too large/snapshot of a keyspace made later", func(t *testing.T, dir string) error {
			return snapshotGet(errDB(t, dir, &Options{MaxKeySize: 4}), "users", "abcde")
		}, []error{ErrKeyTooLarge}, `kvbuf: snapshot of keyspace "users": key of 5 bytes (max 4): key too large`, false},
		{"value too large", func(t *testing.T, dir string) error {
			return mustKV(t, errDB(t, dir, &Options{MaxValueSize: 4}), "users").Put(ctx, []byte("a"), []byte("abcde"), 0)
		}, []error{ErrValueTooLarge}, `kvbuf: keyspace "users": value of 5 bytes (max 4): value too large`, false},
		{"bad range/delete", func(t *testing.T, dir string) error {
			return mustKV(t, errDB(t, dir, nil), "users").DeleteRange(ctx, []byte("b"), []byte("a"), 0)
		}, []error{ErrBadRange}, `kvbuf: keyspace "users": ["b", "a"): lower bound above upper bound`, false},
		{"bad range/iter", func(t *testing.T, dir string) error {
			_, err := mustKV(t, errDB(t, dir, nil), "users").NewIter(&IterOptions{LowerBound: []byte("b"), UpperBound: []byte("a")})
			return err
		}, []error{ErrBadRange}, `kvbuf: keyspace "users": ["b", "a"): lower bound above upper bound`, false},
		{"bad range/set", func(t *testing.T, dir string) error {
			return mustBits(t, errDB(t, dir, nil), "seen").SetRange(ctx, 5, 4, true, 0)
		}, []error{ErrBadRange}, `kvbuf: bitslice "seen": bits [5, 4): lower bound above upper bound`, false},
		{"bad range/getmany", func(t *testing.T, dir string) error {
			return mustBits(t, errDB(t, dir, nil), "seen").GetMany([]uint64{1, 2}, make([]bool, 1))
		}, []error{ErrBadRange}, `kvbuf: bitslice "seen": GetMany: 2 indexes but room for 1: lower bound above upper bound`, false},
		{"out of range", func(t *testing.T, dir string) error {
			return mustBits(t, errDB(t, dir, &Options{MaxBits: 1000}), "seen").Set(ctx, 1000, true, 0)
		}, []error{ErrOutOfRange}, `kvbuf: bitslice "seen": bit 1000 (max 1000): bit index out of range`, false},

		// Ops.
		{"stale op", func(t *testing.T, dir string) error {
			k := mustKV(t, errDB(t, dir, nil), "users")
			mustPut(t, k, "a", "1", 1)
			mustPut(t, k, "a", "2", 2) // ends op 1
			return k.Put(ctx, []byte("a"), []byte("3"), 1)
		}, []error{ErrStaleOp}, `kvbuf: keyspace "users": op 1 is complete (ended, or below an op begun later; the highest op begun is 2): op already claimed by the watermark`, false},
		{"bad op/end", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			mustPut(t, mustKV(t, db, "users"), "a", "1", 1)
			return db.EndOp(ctx, 100)
		}, []error{ErrBadOp}, `kvbuf: EndOp(100): op 100 was never begun (the highest op begun is 1): bad op number`, false},
		{"bad op/write", func(t *testing.T, dir string) error {
			return mustKV(t, errDB(t, dir, nil), "users").Put(ctx, []byte("a"), nil, MaxOp+1)
		}, []error{ErrBadOp}, fmt.Sprintf(`kvbuf: keyspace "users": write of op %d: above the largest op number %d: bad op number`, uint64(MaxOp)+1, uint64(MaxOp)), false},

		// Handles.
		{"dropped/put", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			k := mustKV(t, db, "users")
			if err := db.DropKV(ctx, "users", 0); err != nil {
				t.Fatal(err)
			}
			return k.Put(ctx, []byte("a"), nil, 0)
		}, []error{ErrDropped}, `kvbuf: keyspace "users": keyspace dropped`, false},
		{"dropped/get", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			k := mustKV(t, db, "users")
			if err := db.DropKV(ctx, "users", 0); err != nil {
				t.Fatal(err)
			}
			_, err := k.Get([]byte("a"))
			return err
		}, []error{ErrDropped}, `kvbuf: keyspace "users": keyspace dropped`, false},
		{"foreign handle", func(t *testing.T, dir string) error {
			db := errDB(t, filepath.Join(dir, "a"), nil)
			other := mustKV(t, errDB(t, filepath.Join(dir, "b"), nil), "users")
			return db.Update(ctx, 0, func(b *Batch) error {
				b.Put(other, []byte("a"), nil)
				return nil
			})
		}, []error{ErrForeign}, "kvbuf: batch: keyspace handle: handle of another engine", false},

		// Durability.
		{"sync failed", func(t *testing.T, dir string) error {
			var armed atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if armed.Load() && isWAL(op.Path) && pebbleOpMatches("pebble/wal-sync", op.Kind) {
					return errorfs.ErrInjected
				}
				return nil
			})
			db := errDB(t, dir, &Options{storeFS: errorfs.Wrap(vfs.Default, inj)})
			mustPut(t, mustKV(t, db, "users"), "a", "1", 1)
			armed.Store(true)
			return db.Flush(ctx)
		}, []error{ErrSyncFailed, errorfs.ErrInjected}, `kvbuf: flush generation 1 wait: commit to "<dir>/store": write-ahead log write or sync failed: injected error`, false},

		// Package storage used on its own: its errors are the root's names.
		{"storage/read-only", func(t *testing.T, dir string) error {
			mustCloseStore(t, mustStore(t, dir, nil))
			s := mustStore(t, dir, &storage.Options{ReadOnly: true})
			defer mustCloseStore(t, s)
			b := s.NewBatch()
			b.Put(1, []byte("a"), []byte("1"))
			return s.Apply(b)
		}, []error{ErrReadOnly}, `kvbuf: commit to "<dir>": read-only store`, false},
		{"storage/foreign batch", func(t *testing.T, dir string) error {
			s := mustStore(t, filepath.Join(dir, "a"), nil)
			defer mustCloseStore(t, s)
			other := mustStore(t, filepath.Join(dir, "b"), nil)
			defer mustCloseStore(t, other)
			b := other.NewBatch()
			b.Put(1, []byte("a"), []byte("1"))
			return s.Apply(b)
		}, []error{ErrForeignBatch}, `kvbuf: commit to "<dir>/a": batch belongs to another store`, false},
		{"storage/invalid keyspace", func(t *testing.T, dir string) error {
			s := mustStore(t, dir, nil)
			defer mustCloseStore(t, s)
			_, err := s.Get(0, []byte("a"))
			return err
		}, []error{ErrInvalidKeyspace}, `kvbuf: get: keyspace 0: invalid keyspace id`, false},

		// Install.
		{"bad stream", func(t *testing.T, dir string) error {
			_, err := Install(ctx, filepath.Join(dir, "new"), bytes.NewReader([]byte("not a stream at all")), nil)
			return err
		}, []error{ErrBadStream, ErrCorrupt}, `kvbuf: install into <dir>/new: frame 0 of 544501614 bytes, larger than this engine's largest record allows (1183744): bad snapshot stream`, false},
		{"nil reader", func(t *testing.T, dir string) error {
			_, err := Install(ctx, filepath.Join(dir, "new"), nil, nil)
			if _, serr := os.Stat(filepath.Join(dir, "new")); !errors.Is(serr, fs.ErrNotExist) {
				t.Errorf("Install with a nil reader left %s/new (stat: %v)", dir, serr)
			}
			return err
		}, []error{ErrNilArgument}, `kvbuf: install into <dir>/new: reader: nil argument`, false},
		{"nil writer", func(t *testing.T, dir string) error {
			db := errDB(t, dir, nil)
			snap, err := db.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Close()
			_, err = snap.Export(ctx, nil, 0)
			return err
		}, []error{ErrNilArgument}, `kvbuf: export: writer: nil argument`, false},
	}
	seen := map[error]bool{}
	for _, c := range cases {
		for _, s := range c.is {
			seen[s] = true
		}
		t.Run(c.name, func(t *testing.T) { checkErrCase(t, c) })
	}
	// Every sentinel of errors.go but ErrPanicked and ErrBatchTooLarge is
	// driven here. ErrBatchTooLarge needs a 4 GiB batch: storage's
	// TestBatchTooLarge pins its text through the batch's limit, a test hook.
	for _, s := range []error{ErrClosed, ErrNotFound, ErrLocked, ErrCorrupt, ErrCorruptBlock, ErrCorruptDir,
		ErrCorruptBits, ErrNotEngine, ErrBadName, ErrBadOptions, ErrOutOfRange, ErrKeyTooLarge, ErrValueTooLarge,
		ErrEmptyKey, ErrBadRange, ErrStaleOp, ErrBadOp, ErrDropped, ErrSyncFailed, ErrForeign, ErrBadStream,
		ErrReadOnly, ErrForeignBatch, ErrInvalidKeyspace, ErrNilArgument} {
		if !seen[s] {
			t.Errorf("no case drives %q", s)
		}
	}
}

// TestSentinelTexts pins the text of every sentinel alone.
// TestSentinelsExportedByRootOnly checks that no other package exports a
// name for one.
func TestSentinelTexts(t *testing.T) {
	for _, c := range []struct {
		err  error
		text string
	}{
		{ErrClosed, "kvbuf: closed"},
		{ErrNotFound, "kvbuf: not found"},
		{ErrLocked, "kvbuf: locked by another engine"},
		{ErrCorrupt, "kvbuf: corruption"},
		{ErrCorruptBlock, "kvbuf: corrupt store block"},
		{ErrCorruptDir, "kvbuf: corrupt engine directory"},
		{ErrCorruptBits, "kvbuf: corrupt bitslice file"},
		{ErrNotEngine, "kvbuf: not a kvbuf directory"},
		{ErrBadName, "kvbuf: bad keyspace or bitslice name"},
		{ErrBadOptions, "kvbuf: bad options"},
		{ErrOutOfRange, "kvbuf: bit index out of range"},
		{ErrKeyTooLarge, "kvbuf: key too large"},
		{ErrValueTooLarge, "kvbuf: value too large"},
		{ErrEmptyKey, "kvbuf: empty key"},
		{ErrBadRange, "kvbuf: lower bound above upper bound"},
		{ErrStaleOp, "kvbuf: op already claimed by the watermark"},
		{ErrBadOp, "kvbuf: bad op number"},
		{ErrDropped, "kvbuf: keyspace dropped"},
		{ErrSyncFailed, "kvbuf: write-ahead log write or sync failed"},
		{ErrPanicked, "kvbuf: flush panicked"},
		{ErrForeign, "kvbuf: handle of another engine"},
		{ErrNilArgument, "kvbuf: nil argument"},
		{ErrBadStream, "kvbuf: bad snapshot stream"},
		{ErrReadOnly, "kvbuf: read-only store"},
		{ErrBatchTooLarge, "kvbuf: batch too large"},
		{ErrForeignBatch, "kvbuf: batch belongs to another store"},
		{ErrInvalidKeyspace, "kvbuf: invalid keyspace id"},
	} {
		if got := c.err.Error(); got != c.text {
			t.Errorf("text %q, want %q", got, c.text)
		}
	}
	for _, s := range []error{ErrCorruptBlock, ErrCorruptDir, ErrCorruptBits, ErrBadStream} {
		if !errors.Is(s, ErrCorrupt) {
			t.Errorf("%q does not match ErrCorrupt", s)
		}
	}
	if errors.Is(ErrNotEngine, ErrCorrupt) || errors.Is(ErrCorrupt, ErrCorruptDir) {
		t.Error("ErrNotEngine, or the generic ErrCorrupt, matches a finer corruption")
	}
}

// TestSentinelsExportedByRootOnly checks that the root is the one package
// that exports the module's sentinels: no other package of the module
// declares an exported variable that is one of internal/kverr's values or
// the root's (a second name for a sentinel). Packages return the values
// themselves; callers test them with errors.Is against the root's names.
// raftkv's and kvtool's own sentinels (made with kverr.NewKind or
// errors.New) are theirs and allowed.
func TestSentinelsExportedByRootOnly(t *testing.T) {
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Dir(path) == "." || filepath.ToSlash(filepath.Dir(path)) == "internal/kverr" ||
			!strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]bool{} // the names f gives the root and kverr
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := pathpkg.Base(p)
			if im.Name != nil {
				name = im.Name.Name
			}
			if p == "github.com/kvbuf/kvbuf" || p == "github.com/kvbuf/kvbuf/internal/kverr" {
				names[name] = true
			}
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !n.IsExported() || i >= len(vs.Values) {
						continue
					}
					if sel, ok := vs.Values[i].(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] && strings.HasPrefix(sel.Sel.Name, "Err") {
							found = append(found, fmt.Sprintf("%s: %s = %s.%s", fset.Position(n.Pos()), n.Name, x.Name, sel.Sel.Name))
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: a second exported name for a sentinel (export it from the root only)", f)
	}
}

// mustStore opens a storage.Store in dir, as a user of package storage
// alone would.
func mustStore(t *testing.T, dir string, opts *storage.Options) *storage.Store {
	t.Helper()
	s, err := storage.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustCloseStore closes s.
func mustCloseStore(t *testing.T, s *storage.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// setMeta replaces the store record name of the closed engine in dir.
func setMeta(t *testing.T, dir, name, value string) {
	t.Helper()
	s, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.SetMeta(name, []byte(value))
	if err := errors.Join(s.Apply(b), s.Close()); err != nil {
		t.Fatal(err)
	}
}

// corruptSSTables flips a byte at the fraction at of every sstable of the
// closed engine in dir (after moving the memtables there; 0 is the first
// data block), so that the block holding it fails its checksum when read.
func corruptSSTables(t *testing.T, dir string, at float64) {
	t.Helper()
	db := errDB(t, dir, nil)
	if err := db.FlushMemtables(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, enginedir.StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		p := filepath.Join(dir, enginedir.StoreDir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[2+int(at*float64(len(b)))] ^= 0xff
		writeFile(t, p, b)
		n++
	}
	if n == 0 {
		t.Fatal("no sstable to corrupt")
	}
}

// checkTextRule checks errors.go's "Texts" rule on err: its text ends
// with the own text of c's sentinel (c.is[0], or c.is[1] when c.is[0] is
// ErrCorrupt, which is never returned alone), or with that text followed
// by the whole text of an error of another library's (or the system's)
// that err wraps: its cause.
func checkTextRule(t *testing.T, err error, c errCase) {
	t.Helper()
	s := c.is[0]
	if s == ErrCorrupt && len(c.is) > 1 {
		s = c.is[1]
	}
	got, own := err.Error(), strings.TrimPrefix(s.Error(), "kvbuf: ")
	if s == ErrDiskFull {
		// Never returned alone: the text is the cause's (ENOSPC).
		if !strings.HasSuffix(got, ": "+syscall.ENOSPC.Error()) {
			t.Errorf("text %q does not end with its cause %q", got, syscall.ENOSPC.Error())
		}
		return
	}
	if got == s.Error() || strings.HasSuffix(got, ": "+own) {
		return
	}
	i := strings.LastIndex(got, ": "+own+": ")
	if i < 0 {
		t.Errorf("text %q does not end with its sentinel's text %q", got, own)
		return
	}
	tail := got[i+len(": "+own+": "):]
	var pe *flush.PanicError
	if errors.As(err, &pe) && fmt.Sprint(pe.Value) == tail {
		return // ErrPanicked: the panic's value is the cause
	}
	if !wrapsText(err, tail) {
		t.Errorf("text %q: %q follows the sentinel's text and is not the text of an error it wraps", got, tail)
	}
}

// wrapsText reports whether err's tree holds an error whose text is text
// and that is not a kvbuf error (its text has no "kvbuf: " prefix).
func wrapsText(err error, text string) bool {
	if err == nil {
		return false
	}
	if m := err.Error(); m == text && !strings.HasPrefix(m, "kvbuf: ") {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return wrapsText(u.Unwrap(), text)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if wrapsText(e, text) {
				return true
			}
		}
	}
	return false
}
