package ycsb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// log, if not nil, is the host's own log: every write op is appended
	// to it (one write system call, under opMu, before the engine applies
	// it) and it is synced every FlushInterval (kvbuf.host_log).
	log *hostLog
	// flushWrites: every write op is followed by DB.Flush, so that it is
	// durable when the call returns (kvbuf.flush_writes); concurrent
	// threads share the flushes (group commit).
	flushWrites bool

	inFlush atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// hostLog is the log a host keeps in front of kvbuf (the host's write-ahead
// log, which kvbuf's watermark tells it where to replay from): an
// append-only file next to the engine's directory, written once per op
// (op number, then each key and row) and synced by a background goroutine
// every interval, so that the host loses at most that much of its log on a
// power loss, the same window as the engine's flushes. It starts empty at
// every open: the previous session's Close made every op durable in the
// engine (its watermark covers them), and a host truncates its log up to
// the watermark.
type hostLog struct {
	f        *os.File
	interval time.Duration // how often it is synced (0: only by sync)
	buf      []byte        // opMu held
	mu       sync.Mutex
	err      error // the first failed sync
	stop     chan struct{}
	done     chan struct{}
}

// hostLogSuffix names the host log of an engine in dir: dir + suffix.
const hostLogSuffix = ".hostlog"

func openHostLog(path string, interval time.Duration) (*hostLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	l := &hostLog{f: f, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		if interval <= 0 {
			<-l.stop
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.sync()
			}
		}
	}()
	return l, nil
}

// append writes one record: op, then each key and row with their lengths.
func (l *hostLog) append(op uint64, keys, rows [][]byte) error {
	b := binary.BigEndian.AppendUint64(l.buf[:0], op)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for i, k := range keys {
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		var row []byte
		if rows != nil {
			row = rows[i]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(row)))
		b = append(b, row...)
	}
	l.buf = b
	_, err := l.f.Write(b)
	return err
}

// sync makes the log durable up to now; it returns the first sync error.
func (l *hostLog) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.f.Sync()
	}
	return l.err
}

func (l *hostLog) close() error {
	close(l.stop)
	<-l.done
	return errors.Join(l.sync(), l.f.Close())
}

// lossWindow is the loss window of the window durability mode: how often
// kvbuf's host log is synced (and the other engines' logs, through
// modeProperties). It is kvbuf.host_log_interval if set; else kvbuf's
// FlushInterval (defaults included) if positive; else kvbuf's default
// FlushInterval. A host with a log does not need kvbuf's interval flushes
// for its loss window (it replays its log from the watermark), so
// kvbuf.flush_interval=-1s with the host log synced every second is the
// same promise as pebble's WAL synced every second, with kvbuf flushing
// only when its pending budget fills, as pebble's memtable does.
func lossWindow(p *properties.Properties, o *kvbuf.Options) (time.Duration, error) {
	w, err := getDuration(p, "kvbuf.host_log_interval", 0)
	if err != nil {
		return 0, err
	}
	if w < 0 {
		return 0, fmt.Errorf("%w: kvbuf.host_log_interval=%v: want a positive duration (or unset)", ErrBadProperty, w)
	}
	if w > 0 {
		return w, nil
	}
	if r := o.EnsureDefaults(); r.FlushInterval > 0 {
		return r.FlushInterval, nil
	}
	return (&kvbuf.Options{}).EnsureDefaults().FlushInterval, nil
}

// kvbufFlushPoll is how often the flush watcher samples DB.InFlight.
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

// kvbufHostOptions reads the properties that make the binding a host with
// a log (kvbuf.host_log, which implies kvbuf.ops) or one that waits for
// durability on every write (kvbuf.flush_writes).
func kvbufHostOptions(p *properties.Properties) (hostLog, flushWrites bool, err error) {
	if hostLog, err = getBool(p, "kvbuf.host_log", false); err != nil {
		return false, false, err
	}
	flushWrites, err = getBool(p, "kvbuf.flush_writes", false)
	return hostLog, flushWrites, err
}

func openKvbuf(dir string, p *properties.Properties) (engine, error) {
	o, ops, err := kvbufOptions(p)
	if err != nil {
		return nil, err
	}
	withLog, flushWrites, err := kvbufHostOptions(p)
	if err != nil {
		return nil, err
	}
	db, err := kvbuf.Open(dir, o)
	if err != nil {
		return nil, err
	}
	e := &kvbufEngine{db: db, trackOps: ops || withLog, flushWrites: flushWrites, lastOp: db.Watermark(),
		stop: make(chan struct{}), done: make(chan struct{})}
	if withLog {
		w, err := lossWindow(p, o)
		if err == nil {
			e.log, err = openHostLog(filepath.Clean(dir)+hostLogSuffix, w)
		}
		if err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
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
			// DB.InFlight, not Metrics: Metrics reads pebble's metrics
			// too, tens of microseconds a call, which a 1 ms poll would
			// take from kvbuf's side of the comparison.
			e.inFlush.Store(e.db.InFlight() > 0)
		}
	}
}

func (e *kvbufEngine) flushing() bool { return e.inFlush.Load() }

// storeWork reads the store's counters from the engine's metrics.
func (e *kvbufEngine) storeWork() StoreWork {
	m := e.db.Metrics()
	return StoreWork{m.StoreFlushes, m.StoreCompactions, m.StoreIngests, m.StoreCompactedBytes, m.StoreBytesWritten}
}

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
// later write. With a host log the op's keys and rows (nil rows: deletes)
// are appended to it first, as a host logs an op before applying it; with
// flushWrites the call returns once a Flush made the op durable.
func (e *kvbufEngine) write(ctx context.Context, batch bool, keys, rows [][]byte, fn func(op uint64) error) error {
	if err := e.writeOp(ctx, batch, keys, rows, fn); err != nil {
		return err
	}
	if e.flushWrites {
		return e.db.Flush(ctx)
	}
	return nil
}

func (e *kvbufEngine) writeOp(ctx context.Context, batch bool, keys, rows [][]byte, fn func(op uint64) error) error {
	if !e.trackOps {
		return fn(0)
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	op := e.lastOp + 1
	if e.log != nil {
		if err := e.log.append(op, keys, rows); err != nil {
			return fmt.Errorf("host log: %w", err)
		}
	}
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
	return e.write(ctx, false, [][]byte{key}, [][]byte{row}, func(op uint64) error { return k.Put(ctx, key, row, op) })
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
	return e.write(ctx, true, keys, rows, func(op uint64) error { return e.db.Apply(ctx, b, op) })
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
	return true, e.write(ctx, false, [][]byte{key}, [][]byte{row}, func(op uint64) error { return k.Put(ctx, key, row, op) })
}

func (e *kvbufEngine) delete(ctx context.Context, t *thread, table string, keys [][]byte) error {
	k, err := e.kv(table)
	if err != nil {
		return err
	}
	if len(keys) == 1 {
		return e.write(ctx, false, keys, nil, func(op uint64) error { return k.Delete(ctx, keys[0], op) })
	}
	b := e.batch(t)
	for _, key := range keys {
		b.Delete(k, key)
	}
	return e.write(ctx, true, keys, nil, func(op uint64) error { return e.db.Apply(ctx, b, op) })
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

// durable makes every write acknowledged so far durable: the host log
// synced, then a Flush.
func (e *kvbufEngine) durable(ctx context.Context) error {
	if e.log != nil {
		if err := e.log.sync(); err != nil {
			return fmt.Errorf("host log: %w", err)
		}
	}
	return e.db.Flush(ctx)
}

// close syncs and closes the host log, then closes the engine (whose Close
// makes what is pending durable).
func (e *kvbufEngine) close() error {
	close(e.stop)
	<-e.done
	var err error
	if e.log != nil {
		err = e.log.close()
	}
	return errors.Join(err, e.db.Close())
}

// flushAll makes everything durable and writes the store's memtables to
// sstables (the suite's settle step after a load).
func (e *kvbufEngine) flushAll(ctx context.Context) error { return e.db.FlushMemtables(ctx) }

// waitIdle waits until the store has no flush or compaction running
// (Metrics.StoreJobs) on workload.IdleLooks looks in a row (waitUntil): pebble
// schedules a compaction's successor as it finishes, so none running on
// looks workload.IdlePoll apart is none pending.
func (e *kvbufEngine) waitIdle(ctx context.Context) error {
	return waitUntil(ctx, func() bool { return e.db.Metrics().StoreJobs > 0 })
}
