package ycsb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf"
	"github.com/magiconair/properties"
)

// kvbufEngine binds kvbuf through its public API: a table is a keyspace,
// reads use KV.GetAppend (GetMany for batches) into the thread's buffer,
// batches are one Batch applied as one op, scans are KV iterators.
type kvbufEngine struct {
	db  *kvbuf.DB
	kvs sync.Map // table -> *kvbuf.KV

	// trackOps: every write carries the next op number, assigned and
	// admitted under opMu, as a host replaying its log would (it applies
	// op n before op n+1); otherwise writes carry op 0.
	trackOps bool
	opMu     sync.Mutex
	lastOp   uint64

	inFlush atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// kvbufFlushPoll is how often the flush watcher samples Metrics.InFlight.
const kvbufFlushPoll = time.Millisecond

func kvbufOptions(p *properties.Properties) (*kvbuf.Options, bool, error) {
	o := &kvbuf.Options{}
	var err error
	if o.FlushInterval, err = getDuration(p, "kvbuf.flush_interval", 0); err != nil {
		return nil, false, err
	}
	if o.MaxPendingBytes, err = getInt(p, "kvbuf.max_pending_bytes", 0, -1, 1<<40); err != nil {
		return nil, false, err
	}
	if o.CacheSize, err = getInt(p, "kvbuf.cache_size", 0, 0, 1<<40); err != nil {
		return nil, false, err
	}
	if o.PoolBytes, err = getInt(p, "kvbuf.pool_bytes", 0, -1, 1<<40); err != nil {
		return nil, false, err
	}
	depth, err := getInt(p, "kvbuf.pipeline_depth", 0, 0, 1<<10)
	if err != nil {
		return nil, false, err
	}
	o.PipelineDepth = int(depth)
	if o.IngestThreshold, err = getInt(p, "kvbuf.ingest_threshold", 0, -1, 1<<40); err != nil {
		return nil, false, err
	}
	if o.ReadTierBytes, err = getInt(p, "kvbuf.read_tier_bytes", 0, -1, 1<<40); err != nil {
		return nil, false, err
	}
	if o.FlushQuantum, err = getDuration(p, "kvbuf.flush_quantum", 0); err != nil {
		return nil, false, err
	}
	pct, err := getInt(p, "kvbuf.flush_cpu_percent", 0, 0, 100)
	if err != nil {
		return nil, false, err
	}
	o.FlushCPUPercent = int(pct)
	ops, err := getBool(p, "kvbuf.ops", false)
	if err != nil {
		return nil, false, err
	}
	if err := o.Validate(); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrBadProperty, err)
	}
	return o, ops, nil
}

func openKvbuf(dir string, p *properties.Properties) (engine, error) {
	o, ops, err := kvbufOptions(p)
	if err != nil {
		return nil, err
	}
	db, err := kvbuf.Open(dir, o)
	if err != nil {
		return nil, err
	}
	e := &kvbufEngine{db: db, trackOps: ops, lastOp: db.Watermark(), stop: make(chan struct{}), done: make(chan struct{})}
	go e.watch()
	return e, nil
}

// watch samples whether a flush is in flight until close.
func (e *kvbufEngine) watch() {
	defer close(e.done)
	t := time.NewTicker(kvbufFlushPoll)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.inFlush.Store(e.db.Metrics().InFlight > 0)
		}
	}
}

func (e *kvbufEngine) flushing() bool { return e.inFlush.Load() }

func (e *kvbufEngine) kv(table string) (*kvbuf.KV, error) {
	if k, ok := e.kvs.Load(table); ok {
		return k.(*kvbuf.KV), nil
	}
	k, err := e.db.KV(table)
	if err != nil {
		return nil, err
	}
	e.kvs.Store(table, k)
	return k, nil
}

// write runs fn with the op number the write carries. A tracked op is
// one whole YCSB operation: single calls end it with EndOp (a Batch ends
// its op itself), so the next flush may cover it without waiting for a
// later write.
func (e *kvbufEngine) write(ctx context.Context, batch bool, fn func(op uint64) error) error {
	if !e.trackOps {
		return fn(0)
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	op := e.lastOp + 1
	if err := fn(op); err != nil {
		return err
	}
	e.lastOp = op
	if batch {
		return nil
	}
	return e.db.EndOp(ctx, op)
}

func (e *kvbufEngine) get(_ *thread, table string, key, dst []byte) ([]byte, bool, error) {
	k, err := e.kv(table)
	if err != nil {
		return dst, false, err
	}
	row, err := k.GetAppend(dst, key)
	if errors.Is(err, kvbuf.ErrNotFound) {
		return dst, false, nil
	}
	return row, err == nil, err
}

func (e *kvbufEngine) getMany(_ *thread, table string, keys, rows [][]byte, buf []byte) ([]byte, error) {
	k, err := e.kv(table)
	if err != nil {
		return buf, err
	}
	return k.GetMany(keys, rows, buf)
}

func (e *kvbufEngine) put(ctx context.Context, _ *thread, table string, key, row []byte) error {
	k, err := e.kv(table)
	if err != nil {
		return err
	}
	return e.write(ctx, false, func(op uint64) error { return k.Put(ctx, key, row, op) })
}

// batch returns the thread's reusable Batch, empty.
func (e *kvbufEngine) batch(t *thread) *kvbuf.Batch {
	b, ok := t.engine.(*kvbuf.Batch)
	if !ok {
		b = e.db.NewBatch()
		t.engine = b
	}
	b.Reset()
	return b
}

func (e *kvbufEngine) putMany(ctx context.Context, t *thread, table string, keys, rows [][]byte) error {
	k, err := e.kv(table)
	if err != nil {
		return err
	}
	b := e.batch(t)
	for i := range keys {
		b.Put(k, keys[i], rows[i])
	}
	return e.write(ctx, true, func(op uint64) error { return e.db.Apply(ctx, b, op) })
}

func (e *kvbufEngine) update(ctx context.Context, t *thread, table string, key []byte, merge mergeFunc) (bool, error) {
	k, err := e.kv(table)
	if err != nil {
		return false, err
	}
	old, err := k.GetAppend(t.row[:0], key)
	if errors.Is(err, kvbuf.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t.row = old
	row, err := merge(old, t.out[:0])
	if err != nil {
		return true, err
	}
	t.out = row
	return true, e.write(ctx, false, func(op uint64) error { return k.Put(ctx, key, row, op) })
}

func (e *kvbufEngine) delete(ctx context.Context, t *thread, table string, keys [][]byte) error {
	k, err := e.kv(table)
	if err != nil {
		return err
	}
	if len(keys) == 1 {
		return e.write(ctx, false, func(op uint64) error { return k.Delete(ctx, keys[0], op) })
	}
	b := e.batch(t)
	for _, key := range keys {
		b.Delete(k, key)
	}
	return e.write(ctx, true, func(op uint64) error { return e.db.Apply(ctx, b, op) })
}

func (e *kvbufEngine) scan(_ *thread, table string, start []byte, count int, fn func(key, row []byte) error) error {
	k, err := e.kv(table)
	if err != nil {
		return err
	}
	it, err := k.NewIter(&kvbuf.IterOptions{LowerBound: start})
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok && n < count; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
		n++
	}
	return it.Close()
}

func (e *kvbufEngine) close() error {
	close(e.stop)
	<-e.done
	return e.db.Close()
}

// flushAll makes everything durable and writes the store's memtables to
// sstables (the suite's settle step after a load).
func (e *kvbufEngine) flushAll(ctx context.Context) error { return e.db.FlushMemtables(ctx) }
