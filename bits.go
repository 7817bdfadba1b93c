package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// Bits is a named bit vector: a bitslice file in the engine directory
// behind a pending-changes overlay. It grows as bits past its length are
// set (the file grows at the next flush). Get it from DB.Bits. Safe for
// concurrent use.
type Bits struct {
	db   *DB
	name string
	file *bitslice.File
	ov   *buffer.Bits
}

// Bits returns the bitslice called name, opening its file or creating an
// empty one (durably, before it returns) on first use. Names follow the
// keyspace rules (ErrBadName otherwise).
func (db *DB) Bits(name string) (*Bits, error) {
	if err := checkName("bitslice", name); err != nil {
		return nil, err
	}
	op, err := db.flusher.BeginRead()
	if err != nil {
		return nil, err
	}
	defer op.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	if b, ok := db.bits[name]; ok {
		return b, nil
	}
	dir := filepath.Join(db.dir, BitsDir)
	path := filepath.Join(dir, name+BitsExt)
	f, err := bitslice.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = bitslice.Create(path, 0)
		if err == nil {
			err = fsutil.SyncDir(dir)
			if err != nil {
				_ = f.Close()
				err = fmt.Errorf("kvbuf: sync %s: %w", dir, err)
			}
		}
	}
	if err != nil {
		return nil, wrapOpenErr(err)
	}
	b := &Bits{db: db, name: name, file: f, ov: buffer.NewBits(f, nil)}
	db.bits[name] = b
	db.target.add(name, b.ov)
	return b, nil
}

// Name returns the bitslice's name.
func (b *Bits) Name() string { return b.name }

// Set sets bit i to v, tagged with the host's op number. It may wait for a
// flush to make room when pending memory is over its bound. Indexes past
// Len grow the bitslice at the next flush, up to the bitslice package's
// maximum length.
func (b *Bits) Set(ctx context.Context, i uint64, v bool, op uint64) error {
	o, err := b.db.flusher.BeginWrite(ctx)
	if err != nil {
		return err
	}
	defer o.End()
	if err := b.ov.Set(i, v, op); err != nil {
		return fmt.Errorf("kvbuf: bitslice %q: %w", b.name, err)
	}
	return nil
}

// Get returns bit i: the pending value if there is one, else the stored
// one; false past Len.
func (b *Bits) Get(i uint64) (bool, error) {
	o, err := b.db.flusher.BeginRead()
	if err != nil {
		return false, err
	}
	v := b.ov.Get(i)
	o.End()
	return v, nil
}

// Len returns the bitslice's length including pending growth.
func (b *Bits) Len() (uint64, error) {
	o, err := b.db.flusher.BeginRead()
	if err != nil {
		return 0, err
	}
	defer o.End()
	return b.ov.Len(), nil
}
