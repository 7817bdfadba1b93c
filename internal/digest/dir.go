package digest

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// Dir returns the digest of the engine in the directory dir as its files
// hold it: the keyspaces of the store's catalog with their stored pairs,
// and the bitslice files with their set bits. It writes nothing: the store
// is opened read-only, and each bitslice file is opened (which takes its
// lock) only to read its words.
//
// It sees only what is on disk. For a directory an engine has open it fails
// (the bitslice locks are taken): kvtool inspect checks the engine's lock
// first. For an engine closed cleanly it equals the digest the live engine
// reported (kvbuf's Snapshot.Digest); after a crash it is the digest of
// what survived. Errors wrap the module's sentinels the lower packages
// return (kverr.ErrCorruptBlock, kverr.ErrCorruptBits, kverr.ErrLocked,
// ...) and ctx.Err() if ctx ends first.
func Dir(ctx context.Context, dir string) (Sum, error) {
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return Sum{}, kverr.Errorf("digest of %s: %w", dir, err)
	}
	d := New()
	err = hashStore(ctx, d, st)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Sum{}, kverr.Errorf("digest of %s: %w", dir, err)
	}
	names, err := enginedir.BitsNames(dir)
	if err != nil {
		return Sum{}, kverr.Errorf("digest of %s: %w", dir, err)
	}
	for _, name := range names {
		if err := hashBitsFile(ctx, d, name, filepath.Join(dir, enginedir.BitsDir, name+enginedir.BitsExt)); err != nil {
			return Sum{}, kverr.Errorf("digest of %s: bitslice %q: %w", dir, name, err)
		}
	}
	return d.Sum()
}

// hashStore feeds d every keyspace of the store's catalog, in name order.
func hashStore(ctx context.Context, d *Hasher, st *storage.Store) error {
	b, err := st.GetMeta(enginedir.CatalogMeta)
	if errors.Is(err, kverr.ErrNotFound) {
		b, err = nil, nil
	}
	if err != nil {
		return err
	}
	cat, err := enginedir.ParseCatalog(b)
	if err != nil {
		return kverr.Errorf("keyspace catalog: %w", err)
	}
	for _, name := range cat.Names() {
		d.Keyspace(name)
		it, err := st.NewIter(storage.KeyspaceID(cat.Keyspaces[name]), nil, nil)
		if err != nil {
			return kverr.Errorf("keyspace %q: %w", name, err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					_ = it.Close()
					return err
				}
			}
			d.Pair(it.Key(), it.Value())
		}
		if err := it.Close(); err != nil {
			return kverr.Errorf("keyspace %q: %w", name, err)
		}
	}
	return nil
}

// hashBitsFile feeds d the bitslice file at path, a word at a time.
func hashBitsFile(ctx context.Context, d *Hasher, name, path string) error {
	f, err := bitslice.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	d.Bitslice(name)
	n := f.Len()
	words := (n + 63) / 64
	for w := uint64(0); w < words; w++ {
		if w%(1<<16) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		bits := f.Word(w)
		if w == words-1 && n%64 != 0 {
			bits &= 1<<(n%64) - 1 // bits at or past Len are not part of the bitslice
		}
		d.Word(w, bits)
	}
	return nil
}
