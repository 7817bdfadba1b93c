package kvbuf

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// Checkpoint writes a consistent copy of the engine into dir, an engine
// directory of its own, and returns its watermark. It first flushes (as
// Flush), so the copy holds every write that completed before the call;
// then, with flushes held off for the moment it takes, it copies every
// bitslice file and takes pebble's checkpoint of the store (hard links
// where the file system allows), so that the store and the bitslices are
// of the same instant: every op at or below the returned watermark is
// wholly in the copy, and a host restores it by opening it and replaying
// its log from the watermark + 1. The copy gets an engine id of its own
// (its bitslice files are stamped with it), so neither engine ever takes
// the other's files for its own.
//
// dir must not exist or be an empty directory (it is created, with its
// parents); the copy is complete and durable when Checkpoint returns nil,
// and a failed or cancelled Checkpoint removes what it made (ctx is
// checked before the flush and between the files copied). Errors: ctx.Err(),
// ErrClosed, errors wrapping fs.ErrExist (dir is an engine directory
// already), ErrNotEngine (dir holds something else), ErrLocked (dir is an
// open engine), the file systems' errors.
//
// # Caveats
//
//   - Writes concurrent with Checkpoint may or may not be in the copy; its
//     watermark says which ops are whole in it.
//   - The store's files are hard-linked, so the copy shares their disk
//     space until the engine compacts them away; copy the directory
//     elsewhere (cp -a) to make a backup independent of this file system.
//   - Flushes of the engine wait while the bitslice files are copied (time
//     proportional to their size).
func (db *DB) Checkpoint(ctx context.Context, dir string) (uint64, error) {
	wm, err := db.checkpoint(ctx, dir)
	return wm, db.noteDiskFull(err)
}

func (db *DB) checkpoint(ctx context.Context, dir string) (uint64, error) {
	if err := db.Flush(ctx); err != nil {
		return 0, err
	}
	t, err := db.flusher.Enter()
	if err != nil {
		return 0, err
	}
	defer t.End()
	absent := false
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		absent = true
	}
	d, err := enginedir.Open(dir, &enginedir.Options{StoreFS: db.opts.storeFS})
	if err != nil {
		if absent && !errors.Is(err, ErrLocked) && !errors.Is(err, ErrNotEngine) {
			// What Open made of it (a full disk failing the manifest,
			// say); locked or foreign, it is someone else's by now.
			_ = os.RemoveAll(dir)
		}
		return 0, kverr.Errorf("checkpoint to %s: %w", dir, err)
	}
	if !d.Fresh() {
		_ = d.Close()
		return 0, kverr.Errorf("checkpoint to %s: it is an engine directory already: %w", dir, fs.ErrExist)
	}
	wm, err := db.checkpointInto(ctx, d)
	if err == nil {
		err = failpoint.Hit(failpoint.CheckpointReady)
	}
	if err == nil {
		err = d.MarkReady()
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Nothing of a failed checkpoint is worth keeping; a directory
		// that existed (empty) before stays, emptied.
		if absent {
			_ = os.RemoveAll(dir)
		} else {
			removeContents(dir)
		}
		return 0, kverr.Errorf("checkpoint to %s: %w", dir, err)
	}
	return wm, nil
}

// checkpointInto fills the initialising engine directory d.
func (db *DB) checkpointInto(ctx context.Context, d *enginedir.Dir) (uint64, error) {
	// A checkpoint that crashed earlier may have left files: the
	// directory never became ready, so nothing in it is data.
	if err := removeStoreDir(db.opts.storeFS, d.StorePath()); err != nil {
		return 0, err
	}
	if err := removeContentsErr(d.BitsDirPath()); err != nil {
		return 0, err
	}
	// The instant: no generation writes a bitslice or commits to the
	// store while the files are copied and the store checkpointed. A
	// commit that an earlier Write handed to the store may land in the
	// store's checkpoint or not; its bitslices were written before, so
	// the copies are never older than the store's catalog says.
	//
	// The bitslices are listed under writeMu too: a bitslice is in
	// db.bits before a freeze can take it into a generation (openBits
	// adds it there and to bitsAdded under db.mu), and only a Write,
	// under writeMu, records it in the store's catalog. So every
	// bitslice the copied store can name is listed and copied. (Listed
	// before writeMu, a bitslice created in between and recorded by a
	// Write that took writeMu first was in the copy's catalog and not in
	// its bits directory: a copy that did not open.)
	var bits []*Bits
	err := func() error {
		db.writeMu.Lock()
		defer db.writeMu.Unlock()
		bits = db.bitsList()
		if h := db.opts.hooks; h != nil && h.checkpointListed != nil {
			h.checkpointListed()
		}
		for _, b := range bits {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := copyFile(b.file.Path(), d.BitsPath(b.name)); err != nil {
				return kverr.Errorf("bitslice %q: %w", b.name, err)
			}
		}
		return db.store.Checkpoint(d.StorePath())
	}()
	if err != nil {
		return 0, err
	}

	// The copy's own identity.
	var id uint64
	for id == 0 || id == db.engineID {
		id = rand.Uint64()
	}
	st, err := storage.Open(d.StorePath(), &storage.Options{FS: db.opts.storeFSOrOS(), ErrorIfNotExists: true})
	if err != nil {
		return 0, err
	}
	batch := st.NewBatch()
	batch.SetMeta(enginedir.EngineIDMeta, enginedir.EncodeEngineID(id))
	err = st.Apply(batch)
	if err == nil {
		err = st.Flush() // in an sstable: see putIdentity
	}
	var wm uint64
	if err == nil {
		wm, err = st.Watermark()
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	for _, b := range bits {
		f, err := bitslice.Open(d.BitsPath(b.name))
		if err != nil {
			return 0, err
		}
		f.SetOwner(id)
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
	}
	if err := d.SyncBitsDir(); err != nil {
		return 0, err
	}
	return wm, nil
}

// bitsList returns the engine's bitslices.
func (db *DB) bitsList() []*Bits {
	db.mu.Lock()
	defer db.mu.Unlock()
	bits := make([]*Bits, 0, len(db.bits))
	for _, b := range db.bits {
		bits = append(bits, b)
	}
	return bits
}

// copyFile copies the regular file src to dst (which must not exist),
// synced.
func copyFile(src, dst string) (err error) {
	if err := failpoint.Hit(failpoint.CheckpointCopy); err != nil {
		return kverr.Errorf("copy %s: %w", src, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	failpoint.FileSynced(out, 0, -1)
	return nil
}

func removeStoreDir(fsys interface{ RemoveAll(string) error }, path string) error {
	if fsys == nil {
		return os.RemoveAll(path)
	}
	return fsys.RemoveAll(path)
}

// removeContentsErr removes everything in dir.
func removeContentsErr(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return fsutil.SyncDir(dir)
}

func removeContents(dir string) { _ = removeContentsErr(dir) }
