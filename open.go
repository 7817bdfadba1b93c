package kvbuf

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// The open path, top to bottom. Open takes these steps in this order, and a
// failed step closes whatever the earlier ones opened (closeFiles, at the
// end of this file):
//
//  1. Options: resolved and validated (ErrBadOptions), and the engine
//     attached to Options.MemoryBudget, before the directory is touched.
//  2. The directory (internal/enginedir): its lock (ErrLocked), its
//     manifest (ErrNotEngine for a directory kvbuf did not make,
//     ErrCorruptDir for a damaged one), and the leftovers of an
//     initialisation a crash interrupted, which it finishes.
//  3. The store (openStore): pebble's directory; a half-made one of an
//     engine still initialising is begun again.
//  4. The keyspace catalog (loadCatalog): an overlay per keyspace, and the
//     drops a crash left unfinished, finished by the next flush.
//  5. Identity and bitslices (openAllBits): the engine id, the bitslice
//     catalog, every bitslice file opened and checked against both
//     (ErrCorruptDir for a missing, older, shorter or foreign file); an
//     engine of format 1 gets an id, and its files are stamped with it.
//  6. The manifest marked ready (a new engine) and upgraded to the
//     current format.
//  7. The flusher, from the store's watermark and the highest op of the
//     latest flush (the host replays its log from Watermark()+1); the
//     change feed's retained range read from the store (with
//     Options.WatchRetain) and its recording begun at the watermark.
//  8. The disk-full guard switched from failing to waiting.
//
// From step 2 on, a step's error names the file or directory it concerns
// and matches its sentinel with errors.Is (step 1's names the option):
// TestOpenStepErrors breaks each step in turn, TestErrorTexts pins the
// texts.

// Open opens the engine in dir, creating dir and an empty engine if dir does
// not exist or is empty. A nil opts means defaults (see Options). An engine
// whose creation a crash interrupted (its manifest still says
// initialising: it acknowledged nothing) is finished, a store that its
// creation left half made begun again.
//
// Errors: ErrLocked if another engine has dir open; ErrNotEngine for a
// non-empty directory kvbuf did not create (nothing is written to it);
// ErrCorrupt for damaged files, through one of its finer kinds
// (ErrCorruptDir for the manifest, catalogs or layout, ErrCorruptBits for a
// bitslice file, ErrCorruptBlock for what the pebble store reports);
// ErrBadOptions; ErrBudgetClosed if Options.MemoryBudget is closed. On
// error every file Open opened is closed again.
func Open(dir string, opts *Options) (*DB, error) {
	// 1. Options, and the memory budget.
	o := opts.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	db := &DB{
		opts:      o,
		bopts:     o.bufferOptions(),
		keyspaces: map[string]*KV{},
		bits:      map[string]*Bits{},
		snaps:     map[*Snapshot]struct{}{},
		bitsAdded: enginedir.BitsCatalog{},
	}
	if o.MemoryBudget != nil {
		// Before the directory is touched: a closed budget creates nothing.
		var err error
		if db.share, err = o.MemoryBudget.attach(dir, db); err != nil {
			return nil, err
		}
	}
	// 2. The directory: lock, manifest, leftovers of an interrupted
	// initialisation.
	d, err := enginedir.Open(dir, &enginedir.Options{StoreFS: o.storeFS})
	if err != nil {
		if db.share != nil {
			db.share.detach()
		}
		return nil, err
	}
	db.dir = d
	db.targets.Store(&targetSet{})
	db.feed.init(db)
	db.pacer = newFlushPacer(o.FlushQuantum, o.FlushCPUPercent)
	if err := db.open(); err != nil {
		if db.share != nil {
			db.share.detach()
		}
		db.closeFiles()
		return nil, err
	}
	return db, nil
}

func (db *DB) open() error {
	// 3. The store: pebble's directory, begun again if the engine's
	// creation left it half made.
	if err := db.openStore(); err != nil {
		return err
	}
	// 4. The keyspace catalog: an overlay per keyspace.
	if err := db.loadCatalog(); err != nil {
		return err
	}
	// 5. Identity and bitslices: the engine id, the bitslice catalog, every
	// bitslice file checked against it (see "Bitslice identity" below).
	if err := db.openAllBits(); err != nil {
		return err
	}
	// 6. The manifest: ready once the store is durable (a fresh engine),
	// then of the current format (the engine id and the bitslice catalog
	// are durable: a format-1 directory may now say so).
	if db.dir.Fresh() {
		if err := db.dir.MarkReady(); err != nil {
			return err
		}
	}
	if err := db.dir.Upgrade(); err != nil {
		return err
	}
	// 7. The flusher, from the watermark and the highest op of the latest
	// flush: what the host replays is its log above the watermark.
	wm, err := db.store.Watermark()
	if err != nil {
		return err
	}
	highest, err := db.loadHighestOp()
	if err != nil {
		return err
	}
	db.flusher, err = flush.New((*target)(db), db.opts.flushOptions(wm, highest))
	if err != nil {
		return err
	}
	if db.opts.WatchRetain != nil {
		if err := db.feed.openRetained(wm); err != nil {
			return err
		}
	}
	if db.opts.WatchFromOpen || db.opts.WatchRetain != nil {
		db.feed.startAtOpen(wm)
	}
	// 8. From now on a store write that finds the disk full waits for space
	// and stalls the flusher (diskfull.go); during Open it failed instead.
	db.stallTo.Store(db.flusher)
	db.guard.Resume()
	return nil
}

// openStore opens the pebble store (step 3). A store that is missing
// under a ready manifest is ErrCorruptDir (a ready manifest is written only
// once the store is durable); one an engine still initialising left half
// made is removed and created again.
func (db *DB) openStore() error {
	fresh := db.dir.Fresh()
	so := db.opts.storageOptions()
	so.FS = db.guardStore()
	so.ErrorIfNotExists = !fresh // a ready manifest without a store means lost data
	st, err := storage.Open(db.dir.StorePath(), so)
	if fresh && errors.Is(err, ErrCorrupt) {
		// An engine still initialising has acknowledged nothing: a store
		// its creation left half made is begun again (a power cut in
		// pebble's creation can leave the marker naming a MANIFEST
		// whose directory entry did not reach the disk).
		if rerr := removeStoreDir(so.FS, db.dir.StorePath()); rerr == nil {
			st, err = storage.Open(db.dir.StorePath(), so)
		}
	}
	if !fresh && errors.Is(err, fs.ErrNotExist) {
		// A ready manifest is written only once the store is durable.
		return kverr.Errorf("%s has a ready manifest but no store: %w: %w", db.Dir(), ErrCorruptDir, err)
	}
	if err != nil {
		return err
	}
	db.store = st
	return nil
}

// loadCatalog reads the keyspace catalog and makes an overlay per keyspace.
func (db *DB) loadCatalog() error {
	b, err := db.store.GetMeta(enginedir.CatalogMeta)
	switch {
	case errors.Is(err, ErrNotFound):
		db.catalog = enginedir.NewCatalog()
		return nil
	case err != nil:
		return err
	}
	c, err := enginedir.ParseCatalog(b)
	if err != nil {
		return kverr.Errorf("%s: keyspace catalog: %w", db.dir.Path(), err)
	}
	db.catalog = c
	if len(c.Dropped) > 0 {
		// Keyspaces whose drop was not yet durable: finish it with the
		// next flush (the catalog is rewritten without them).
		db.catDirty = true
		db.markCatalog()
	}
	for name, id := range c.Keyspaces {
		if _, err := db.newKV(name, storage.KeyspaceID(id)); err != nil {
			return err
		}
	}
	return nil
}

// Bitslice identity. Every bitslice is in the bitslice catalog (a store meta
// entry, enginedir.BitsCatalog), with the write generation and length of its
// last write the store made durable; its file's header carries the engine's
// id and the generation of its last write. The file is synced before the
// store batch that records the generation, so the header's generation is
// never below the catalog's. Open checks every file against the catalog:
// a catalogued file that is missing, an older copy (lower generation), a
// shorter one, another engine's file or a format-1 file the engine never
// had fail Open with ErrCorruptDir, and only DB.Bits creates a bitslice. A
// file the engine made and no flush recorded yet (a crash right after
// DB.Bits) is adopted: no write of it can be covered by the watermark, as
// the flush that would have written it records it in the same batch.
//
// Write generations: the flush generation g of this session writes
// generation genBase+g, where genBase is the highest generation in the
// catalog or in any header at Open, so generations grow across sessions.

// openAllBits loads the engine id and the bitslice catalog and opens every
// bitslice, checking each file's identity. Called by Open, before the
// flusher starts. An engine of an earlier format (no id) gets an id, its
// files are catalogued and stamped with it.
func (db *DB) openAllBits() error {
	id, cat, fresh, err := db.loadIdentity()
	if err != nil {
		return err
	}
	names, err := enginedir.BitsNames(db.dir.Path())
	if err != nil {
		return err
	}
	onDisk := map[string]bool{}
	for _, name := range names {
		onDisk[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(cat)) {
		if !onDisk[name] {
			return kverr.Errorf("bitslice %q is in the engine's catalog (written at generation %d, %d bits) but %s is missing: %w",
				name, cat[name].Gen, cat[name].Len, db.dir.BitsPath(name), ErrCorruptDir)
		}
	}
	if fresh && db.dir.Fresh() && len(names) > 0 {
		return kverr.Errorf("%s: bitslice files %v in an engine being initialised (kvbuf makes none there): %w", db.dir.BitsDirPath(), names, ErrCorruptDir)
	}
	files := make([]*bitslice.File, len(names))
	for i, name := range names {
		b, err := db.openBits(name, false)
		if err != nil {
			return err
		}
		files[i] = b.file
	}
	if fresh {
		// An engine of format 1 had no catalog: its files are what it
		// had, taken as they are (as that engine would have).
		for i, name := range names {
			f := files[i]
			if f.Version() != 1 {
				return kverr.Errorf("bitslice %q: a format-%d file (owner %016x) in an engine of format 1 (%s): %w", name, f.Version(), f.Owner(), f.Path(), ErrCorruptDir)
			}
			cat[name] = enginedir.BitsEntry{Len: f.Len(), V1: true}
		}
	}
	// Check every file before anything is written: a refused Open changes
	// nothing.
	for i, name := range names {
		f := files[i]
		e, ok := cat[name]
		h := enginedir.BitsHeader{Version: f.Version(), Owner: f.Owner(), Gen: f.Gen(), Len: f.Len()}
		if err := enginedir.CheckBitsFile(name, h, e, ok, id); err != nil {
			return kverr.Errorf("%s: %w", f.Path(), err)
		}
		db.genBase = max(db.genBase, e.Gen, h.Gen)
		if !ok {
			db.bitsAdded[name] = enginedir.BitsEntry{Gen: h.Gen, Len: h.Len}
			db.markCatalog()
		}
	}
	if fresh {
		if err := db.putIdentity(id, cat); err != nil {
			return err
		}
	}
	db.engineID, db.catW = id, cat
	upgraded := false
	for i, name := range names {
		if e := cat[name]; e.V1 {
			// Stamp the engine's id: from now on the file is version 2.
			files[i].SetOwner(id)
			if err := files[i].Sync(); err != nil {
				return kverr.Errorf("bitslice %q: record the engine id: %w", name, err)
			}
			cat[name] = enginedir.BitsEntry{Gen: e.Gen, Len: e.Len}
			upgraded = true
		}
	}
	if upgraded {
		return db.putIdentity(id, cat)
	}
	return nil
}

// loadIdentity reads the engine id and the bitslice catalog from the store.
// An engine without an id (a new one, or one of format 1) gets a random
// one; fresh reports that, and that the catalog must be made and written.
func (db *DB) loadIdentity() (id uint64, cat enginedir.BitsCatalog, fresh bool, err error) {
	b, err := db.store.GetMeta(enginedir.EngineIDMeta)
	switch {
	case errors.Is(err, ErrNotFound):
		for id == 0 {
			id = rand.Uint64()
		}
		return id, enginedir.BitsCatalog{}, true, nil
	case err != nil:
		return 0, nil, false, err
	}
	if id, err = enginedir.ParseEngineID(b); err != nil {
		return 0, nil, false, kverr.Errorf("%s: %w", db.Dir(), err)
	}
	b, err = db.store.GetMeta(enginedir.BitsCatalogMeta)
	switch {
	case errors.Is(err, ErrNotFound):
		return id, enginedir.BitsCatalog{}, false, nil
	case err != nil:
		return 0, nil, false, err
	}
	if cat, err = enginedir.ParseBitsCatalog(b); err != nil {
		return 0, nil, false, kverr.Errorf("%s: %w", db.Dir(), err)
	}
	return id, cat, false, nil
}

// putIdentity makes the engine id and the bitslice catalog durable in the
// store (Open only: the flusher has not started), in an sstable, not only
// in the write-ahead log: the id must outlive damage to the newest log,
// which the store survives by dropping its newest commits, or every file
// stamped with it would look foreign.
func (db *DB) putIdentity(id uint64, cat enginedir.BitsCatalog) error {
	batch := db.store.NewBatch()
	batch.SetMeta(enginedir.EngineIDMeta, enginedir.EncodeEngineID(id))
	batch.SetMeta(enginedir.BitsCatalogMeta, cat.Encode())
	err := db.store.Apply(batch)
	if err == nil {
		err = db.store.Flush()
	}
	if err != nil {
		return kverr.Errorf("%s: record the engine id and bitslice catalog: %w", db.Dir(), err)
	}
	return nil
}

// loadHighestOp reads the highest op seen as of the latest flush (0 if the
// engine never wrote it).
func (db *DB) loadHighestOp() (uint64, error) {
	b, err := db.store.GetMeta(enginedir.HighestOpMeta)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case len(b) != 8:
		return 0, kverr.Errorf("%s: highest op record of %d bytes: %w", db.Dir(), len(b), ErrCorruptBlock)
	}
	return binary.BigEndian.Uint64(b), nil
}

// closeFiles releases whatever Open acquired, for a failed Open.
func (db *DB) closeFiles() {
	for _, b := range db.bits {
		_ = b.file.Close()
	}
	if db.store != nil {
		_ = db.store.Close()
	}
	_ = db.dir.Discard()
}
