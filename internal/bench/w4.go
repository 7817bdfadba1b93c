package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/internal/workload"
	"github.com/kvbuf/kvbuf/storage"
)

// w4Goroutines are W4's G values (workloads.md).
var w4Goroutines = [...]int{1, 4, 16, 64}

// w4Impl is one W4 implementation: how a goroutine writes one key, how it
// flushes, how the harness checks that a write is durable and counts
// physical syncs. Each has its own store and op-number sequence.
type w4Impl struct {
	name    string
	write   func(ctx context.Context, key, val []byte, op uint64) error
	flush   func(ctx context.Context) error
	durable func(key []byte, op uint64) (bool, error)
	syncs   func() int64

	ops    atomic.Uint64 // op numbers, increasing across rounds
	rounds atomic.Uint64 // round ids, so every round writes new keys
}

// w4Key is the key goroutine g writes in its i-th iteration of round r.
func w4Key(r uint64, g, i int) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, r)
	binary.BigEndian.PutUint32(k[8:], uint32(g))
	binary.BigEndian.PutUint32(k[12:], uint32(i))
	return k
}

var w4Value = []byte("w4-value-16bytes")

// round runs one W4 round with G goroutines of per iterations each, through
// workload.FlushLoop (the flush package's harness).
func (im *w4Impl) round(ctx context.Context, G, per int) (RoundResult, error) {
	r := im.rounds.Add(1)
	ops := make([][]uint64, G)
	for g := range ops {
		ops[g] = make([]uint64, per)
	}
	var durErr error
	var durMu sync.Mutex
	loop := workload.FlushLoop{
		Goroutines:   G,
		PerGoroutine: per,
		Write: func(g, i int) error {
			op := im.ops.Add(1)
			ops[g][i] = op
			return im.write(ctx, w4Key(r, g, i), w4Value, op)
		},
		Flush: im.flush,
		Durable: func(g, i int) bool {
			ok, err := im.durable(w4Key(r, g, i), ops[g][i])
			if err != nil {
				durMu.Lock()
				durErr = err
				durMu.Unlock()
				return true
			}
			return ok
		},
	}
	s0 := im.syncs()
	res, err := loop.Run(ctx)
	if err == nil {
		err = durErr
	}
	if err != nil {
		return RoundResult{}, err
	}
	return RoundResult{
		Ops:        int(res.Writes),
		Elapsed:    res.Elapsed,
		Flushes:    res.Flushes,
		Syncs:      im.syncs() - s0,
		Violations: res.Violations,
		Latencies:  res.Latencies,
	}, nil
}

// setupW4 builds W4: a kvbuf engine (group commit by the flusher) and two
// buffer.KV overlays over their own storage.Store, flushed by every caller
// under a mutex (per-caller-sync) or through one singleflight key
// (x/sync-singleflight, which lets a caller join a flush that froze before
// its write: a coverage violation).
func setupW4(ctx context.Context, s *Suite, c Config) error {
	db, err := kvbuf.Open(filepath.Join(s.dir, "engine"), engineOptions())
	if err != nil {
		return err
	}
	s.onClose(db.Close)
	kv, err := db.KV("w4")
	if err != nil {
		return err
	}
	engine := &w4Impl{
		name: ImplKvbuf,
		write: func(ctx context.Context, key, val []byte, op uint64) error {
			return kv.Put(ctx, key, val, op)
		},
		flush: db.Flush,
		// The engine's store is private; a Flush that returned before the
		// watermark reached the caller's op did not cover its write.
		durable: func(_ []byte, op uint64) (bool, error) { return db.Watermark() >= op, nil },
		syncs:   func() int64 { return db.Stats().PhysicalFlushes },
	}

	overlay := func(name string) (*buffer.KV, *storage.Store, error) {
		st, err := storage.Open(filepath.Join(s.dir, name), nil)
		if err != nil {
			return nil, nil, err
		}
		s.onClose(st.Close)
		return buffer.NewKV(st, &buffer.Options{MaxPendingBytes: -1}), st, nil
	}
	// durableIn reads the store under the overlay: exact.
	durableIn := func(st *storage.Store) func([]byte, uint64) (bool, error) {
		return func(key []byte, op uint64) (bool, error) {
			wm, err := st.Watermark()
			if err != nil {
				return false, err
			}
			_, err = st.Get(key)
			switch {
			case err == nil:
				return wm >= op, nil
			case errors.Is(err, storage.ErrNotFound):
				return false, nil
			}
			return false, err
		}
	}
	// physical freezes, applies and releases ov once; wm only grows, so
	// every call commits one synced batch (with at least the watermark).
	physical := func(ov *buffer.KV, wm *uint64, syncs *atomic.Int64) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			*wm = max(*wm, ov.Freeze())
			if err := ov.Apply(ctx, *wm); err != nil {
				return err
			}
			ov.Release()
			syncs.Add(1)
			return nil
		}
	}

	pcsKV, pcsStore, err := overlay("per-caller-sync")
	if err != nil {
		return err
	}
	var pcsMu sync.Mutex
	var pcsWM uint64
	var pcsSyncs atomic.Int64
	pcsFlush := physical(pcsKV, &pcsWM, &pcsSyncs)
	pcs := &w4Impl{
		name: ImplPerCallerSync,
		write: func(_ context.Context, key, val []byte, op uint64) error {
			return pcsKV.Put(key, val, op)
		},
		flush: func(ctx context.Context) error {
			pcsMu.Lock()
			defer pcsMu.Unlock()
			return pcsFlush(ctx)
		},
		durable: durableIn(pcsStore),
		syncs:   pcsSyncs.Load,
	}

	sfKV, sfStore, err := overlay("singleflight")
	if err != nil {
		return err
	}
	var sf singleflight.Group
	var sfMu sync.Mutex // singleflight runs one call at a time; this orders memory for the race detector
	var sfWM uint64
	var sfSyncs atomic.Int64
	sfFlush := physical(sfKV, &sfWM, &sfSyncs)
	sfl := &w4Impl{
		name: ImplSingleflight,
		write: func(_ context.Context, key, val []byte, op uint64) error {
			return sfKV.Put(key, val, op)
		},
		flush: func(ctx context.Context) error {
			_, err, _ := sf.Do("flush", func() (any, error) {
				sfMu.Lock()
				defer sfMu.Unlock()
				return nil, sfFlush(ctx)
			})
			return err
		},
		durable: durableIn(sfStore),
		syncs:   sfSyncs.Load,
	}

	per := c.FlushesPerGoroutine
	for _, G := range w4Goroutines {
		w := &Workload{Name: fmt.Sprintf("W4/flush-g%d", G)}
		for _, im := range []*w4Impl{engine, pcs, sfl} {
			w.Impls = append(w.Impls, Impl{Name: im.name, Round: func(ctx context.Context) (RoundResult, error) {
				return im.round(ctx, G, per)
			}})
		}
		s.Workloads = append(s.Workloads, w)
	}
	return nil
}
