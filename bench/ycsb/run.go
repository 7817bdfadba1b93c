package ycsb

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"
)

// Histogram range: latencies from 1 ns to 100 s, 3 significant digits.
const (
	histMin    = 1
	histMax    = int64(100 * time.Second)
	histDigits = 3
)

// OpReadInFlush names the reads that started or ended while the engine was
// flushing (DB.Flushing); they are counted under OpRead too.
const OpReadInFlush = "READ@FLUSH"

// OpScanInFlush names the scans that started or ended while the engine was
// flushing; they are counted under OpScan too (workload E's reads are
// scans).
const OpScanInFlush = "SCAN@FLUSH"

// Result is what one load or run measured.
type Result struct {
	// Ops is the number of operations done (a batch of n counts n).
	Ops int64
	// Elapsed is the wall time from the first operation to the last
	// thread's end.
	Elapsed time.Duration
	// Latency maps each operation name (OpRead, ..., OpReadInFlush,
	// OpScanInFlush) to the
	// distribution of its latencies in nanoseconds.
	Latency map[string]*hdrhistogram.Histogram
	// Records is the number of records in the table afterwards (the key
	// numbers the load and the runs inserted).
	Records int64
	// CPU is the process's user+system CPU time over the run (set by
	// Bench, which measures through the engine's Close; 0 if unknown).
	CPU time.Duration
	// UserBytes is the user data the operations wrote: the key and the
	// field values of every insert and update (a read-modify-write's
	// update included), field names and row encoding left out.
	UserBytes int64
	// DiskBytes, if DiskMeasured, is what the process wrote to disk over
	// the run (workload.ProcessDiskWrites; set by Bench, through the
	// settle step that waits out the run's flushes and compactions, and
	// the engine's Close). Bench leaves it unmeasured on an engine it
	// cannot wait out (badger).
	DiskBytes    int64
	DiskMeasured bool
	// Store, if StoreMeasured, is the work the engine's store did over the
	// run, from where DiskBytes starts through the settle step (DiskBytes
	// goes on through the Close, which this leaves out: a Close after the
	// settle step writes little, the final flush's receipt): where the disk
	// bytes went. Bench leaves it unmeasured on an
	// engine that reports none (badger, bbolt).
	Store         StoreWork
	StoreMeasured bool
}

// StoreWork is what an LSM store (pebble: kvbuf's store, or pebble alone)
// did over a load or a run: its memtable flushes, compactions and
// ingestions, the bytes its compactions wrote, and every byte it wrote
// (its write-ahead log, the tables its flushes and compactions wrote, the
// tables ingested).
type StoreWork struct {
	Flushes, Compactions, Ingests int64
	CompactedBytes, WrittenBytes  int64
}

// sub returns w - o, counter by counter.
func (w StoreWork) sub(o StoreWork) StoreWork {
	return StoreWork{w.Flushes - o.Flushes, w.Compactions - o.Compactions, w.Ingests - o.Ingests,
		w.CompactedBytes - o.CompactedBytes, w.WrittenBytes - o.WrittenBytes}
}

// add returns w + o, counter by counter.
func (w StoreWork) add(o StoreWork) StoreWork {
	return StoreWork{w.Flushes + o.Flushes, w.Compactions + o.Compactions, w.Ingests + o.Ingests,
		w.CompactedBytes + o.CompactedBytes, w.WrittenBytes + o.WrittenBytes}
}

// OpsPerSec is Ops / Elapsed.
func (r *Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// merge adds o's latencies into r's.
func (r *Result) merge(o *Result) {
	if r.Latency == nil {
		r.Latency = map[string]*hdrhistogram.Histogram{}
	}
	for op, h := range o.Latency {
		if mine := r.Latency[op]; mine != nil {
			mine.Merge(h)
		} else {
			r.Latency[op] = hdrhistogram.Import(h.Export())
		}
	}
}

// RunOptions configures a load or a run.
type RunOptions struct {
	// Threads is the number of client threads (goroutines). Default 1.
	Threads int
	// Seed seeds the threads' generators: thread i of two runs with the
	// same seed chooses the same operations and keys. Default 0.
	Seed int64
	// MaxTime, if positive, ends the run after that long even if the
	// operations are not all done (YCSB's maxexecutiontime).
	MaxTime time.Duration
	// Done, if not nil, is advanced as operations complete (for progress).
	Done *atomic.Int64
}

// threadRec is one thread's measurements.
type threadRec struct {
	hist    map[string]*hdrhistogram.Histogram
	flusher interface{ Flushing() (bool, bool) }
	// userBytes counts the keys and field values the thread wrote.
	userBytes int64
}

// wrote counts a write of key with values in t's user bytes.
func (t *threadRec) wrote(key string, values map[string][]byte) {
	t.userBytes += int64(len(key))
	for _, v := range values {
		t.userBytes += int64(len(v))
	}
}

func newThreadRec(db goycsb.DB) *threadRec {
	t := &threadRec{hist: map[string]*hdrhistogram.Histogram{}}
	if f, ok := db.(interface{ Flushing() (bool, bool) }); ok {
		if _, known := f.Flushing(); known {
			t.flusher = f
		}
	}
	return t
}

func (t *threadRec) record(op string, d time.Duration) {
	h := t.hist[op]
	if h == nil {
		h = hdrhistogram.New(histMin, histMax, histDigits)
		t.hist[op] = h
	}
	_ = h.RecordValue(min(max(int64(d), histMin), histMax)) // in range: cannot fail
}

func (t *threadRec) inFlush() bool {
	if t.flusher == nil {
		return false
	}
	f, _ := t.flusher.Flushing()
	return f
}

// threadSeed derives thread i's seed from the run's.
func threadSeed(seed int64, i int) int64 {
	var h maphash.Hash
	h.SetSeed(seedOfHashes)
	fmt.Fprintf(&h, "%d/%d", seed, i)
	return int64(h.Sum64() >> 1)
}

var seedOfHashes = maphash.MakeSeed()

// Load inserts w's records [InsertStart, InsertStart+InsertCount) into db
// with o.Threads threads, batch records per BatchInsert (1, or a db that is
// not a BatchDB: Insert each).
func Load(ctx context.Context, db goycsb.DB, w *Workload, batch int, o RunOptions) (*Result, error) {
	seq := newKeySeq(w.InsertStart)
	end := w.InsertStart + w.InsertCount
	choosers := make([]*chooser, max(o.Threads, 1))
	for i := range choosers {
		choosers[i] = w.newChooser(threadSeed(o.Seed, i), nil, 0)
	}
	return drive(ctx, db, w, o, func(ctx context.Context, th *worker) (int64, error) {
		n := int64(max(batch, 1))
		first := seq.next.Add(n) - n
		if first >= end {
			return 0, errDone
		}
		n = min(n, end-first)
		if n == 1 && batch <= 1 {
			th.c.values(th.vals[0], th.bufs[0], true)
			key := w.KeyName(first)
			th.rec.wrote(key, th.vals[0])
			start := time.Now()
			err := db.Insert(ctx, w.Table, key, th.vals[0])
			th.rec.record(OpInsert, time.Since(start))
			return 1, err
		}
		th.keys = th.keys[:0]
		for i := range n {
			th.keys = append(th.keys, w.KeyName(first+i))
			th.c.values(th.vals[i], th.bufs[i], true)
			th.rec.wrote(th.keys[i], th.vals[i])
		}
		bdb, ok := db.(goycsb.BatchDB)
		if !ok { // as go-ycsb's client: one Insert each
			for i, k := range th.keys {
				start := time.Now()
				err := db.Insert(ctx, w.Table, k, th.vals[i])
				th.rec.record(OpInsert, time.Since(start))
				if err != nil {
					return int64(i), err
				}
			}
			return n, nil
		}
		start := time.Now()
		err := bdb.BatchInsert(ctx, w.Table, th.keys, th.vals[:n])
		th.rec.record(OpBatchInsert, time.Since(start))
		return n, err
	}, choosers, max(batch, 1), end)
}

// Run runs w.OperationCount operations of w against db, which holds
// records records (key numbers [0, records)); Result.Records counts the
// records it holds afterwards.
func Run(ctx context.Context, db goycsb.DB, w *Workload, records int64, o RunOptions) (*Result, error) {
	seq := newKeySeq(records)
	var left atomic.Int64
	left.Store(w.OperationCount)
	batch := max(w.BatchSize, 1)
	o.Threads = max(o.Threads, 1)
	choosers := make([]*chooser, o.Threads)
	for i := range choosers {
		choosers[i] = w.newChooser(threadSeed(o.Seed, i), seq, records)
	}
	res, err := drive(ctx, db, w, o, func(ctx context.Context, th *worker) (int64, error) {
		if left.Add(-int64(batch))+int64(batch) <= 0 {
			return 0, errDone
		}
		return th.transaction(ctx, db, w, seq, batch)
	}, choosers, batch, records)
	if res != nil {
		res.Records = seq.next.Load()
	}
	return res, err
}

// errDone ends a thread's loop.
var errDone = errors.New("done")

// worker is one client thread.
type worker struct {
	id   int
	c    *chooser
	rec  *threadRec
	keys []string
	vals []map[string][]byte
	bufs [][][]byte
	one  []string
	kbuf []byte
}

// drive runs step on o.Threads threads (thread i with choosers[i]) until one returns errDone (or
// MaxTime passes) and collects their measurements. The first error of a
// step other than errDone stops every thread and is returned.
func drive(ctx context.Context, db goycsb.DB, w *Workload, o RunOptions, step func(context.Context, *worker) (int64, error), choosers []*chooser, batch int, records int64) (*Result, error) {
	threads := max(o.Threads, 1)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var deadline time.Time
	workers := make([]*worker, threads)
	for i := range workers {
		th := &worker{id: i, c: choosers[i], rec: newThreadRec(db), one: make([]string, 1)}
		for range batch {
			th.vals = append(th.vals, map[string][]byte{})
			th.bufs = append(th.bufs, make([][]byte, w.FieldCount))
		}
		workers[i] = th
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	if o.MaxTime > 0 {
		deadline = start.Add(o.MaxTime)
	}
	for _, th := range workers {
		wg.Go(func() {
			tctx := db.InitThread(ctx, th.id, threads)
			defer db.CleanupThread(tctx)
			var n, reported int64
			defer func() { total.Add(n) }()
			for i := 0; ; i++ {
				if ctx.Err() != nil {
					return
				}
				if !deadline.IsZero() && i%16 == 0 && time.Now().After(deadline) {
					return
				}
				k, err := step(tctx, th)
				n += k
				if o.Done != nil && n-reported >= 64 {
					o.Done.Add(n - reported)
					reported = n
				}
				if errors.Is(err, errDone) {
					if o.Done != nil {
						o.Done.Add(n - reported)
					}
					return
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	res := &Result{Ops: total.Load(), Elapsed: time.Since(start), Records: records}
	for _, th := range workers {
		res.merge(&Result{Latency: th.rec.hist})
		res.UserBytes += th.rec.userBytes
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	return res, ctx.Err()
}

// transaction does one operation (or one batch) of the workload.
func (th *worker) transaction(ctx context.Context, db goycsb.DB, w *Workload, seq *keySeq, batch int) (int64, error) {
	c := th.c
	kind := c.nextOp()
	if batch > 1 {
		return th.batchTransaction(ctx, db, w, seq, kind, batch)
	}
	switch kind {
	case kindRead:
		key := w.KeyName(c.nextKey())
		fields := c.fields(th.one)
		flushing := th.rec.inFlush()
		start := time.Now()
		_, err := db.Read(ctx, w.Table, key, fields)
		d := time.Since(start)
		th.rec.record(OpRead, d)
		if flushing || th.rec.inFlush() {
			th.rec.record(OpReadInFlush, d)
		}
		return 1, err
	case kindUpdate:
		key := w.KeyName(c.nextKey())
		c.values(th.vals[0], th.bufs[0], w.WriteAllFields)
		th.rec.wrote(key, th.vals[0])
		start := time.Now()
		err := db.Update(ctx, w.Table, key, th.vals[0])
		th.rec.record(OpUpdate, time.Since(start))
		return 1, err
	case kindInsert:
		n := seq.Next(c.r)
		key := w.KeyName(n)
		c.values(th.vals[0], th.bufs[0], true)
		th.rec.wrote(key, th.vals[0])
		start := time.Now()
		err := db.Insert(ctx, w.Table, key, th.vals[0])
		th.rec.record(OpInsert, time.Since(start))
		if err == nil {
			seq.ack(n)
		}
		return 1, err
	case kindScan:
		key := w.KeyName(c.nextKey())
		count := c.scanLength()
		fields := c.fields(th.one)
		flushing := th.rec.inFlush()
		start := time.Now()
		_, err := db.Scan(ctx, w.Table, key, count, fields)
		d := time.Since(start)
		th.rec.record(OpScan, d)
		if flushing || th.rec.inFlush() {
			th.rec.record(OpScanInFlush, d)
		}
		return 1, err
	default: // read-modify-write
		key := w.KeyName(c.nextKey())
		fields := c.fields(th.one)
		c.values(th.vals[0], th.bufs[0], w.WriteAllFields)
		start := time.Now()
		flushing := th.rec.inFlush()
		_, err := db.Read(ctx, w.Table, key, fields)
		mid := time.Now()
		th.rec.record(OpRead, mid.Sub(start))
		if flushing || th.rec.inFlush() {
			th.rec.record(OpReadInFlush, mid.Sub(start))
		}
		if err == nil {
			th.rec.wrote(key, th.vals[0])
			err = db.Update(ctx, w.Table, key, th.vals[0])
			end := time.Now()
			th.rec.record(OpUpdate, end.Sub(mid))
			th.rec.record(OpReadModifyWrite, end.Sub(start))
		}
		return 1, err
	}
}

// batchTransaction does one batch of batch reads, updates or inserts.
func (th *worker) batchTransaction(ctx context.Context, db goycsb.DB, w *Workload, seq *keySeq, kind opKind, batch int) (int64, error) {
	bdb, ok := db.(goycsb.BatchDB)
	if !ok {
		return 0, fmt.Errorf("%w: batch.size %d but %T does not implement BatchDB", ErrBadProperty, batch, db)
	}
	c := th.c
	th.keys = th.keys[:0]
	var nums []int64
	for i := range batch {
		var n int64
		if kind == kindInsert {
			n = seq.Next(c.r)
			nums = append(nums, n)
		} else {
			n = c.nextKey()
		}
		th.keys = append(th.keys, w.KeyName(n))
		if kind != kindRead {
			c.values(th.vals[i], th.bufs[i], kind == kindInsert || w.WriteAllFields)
			th.rec.wrote(th.keys[i], th.vals[i])
		}
	}
	start := time.Now()
	var err error
	var op string
	switch kind {
	case kindRead:
		op = OpBatchRead
		_, err = bdb.BatchRead(ctx, w.Table, th.keys, c.fields(th.one))
	case kindUpdate:
		op = OpBatchUpdate
		err = bdb.BatchUpdate(ctx, w.Table, th.keys, th.vals[:batch])
	case kindInsert:
		op = OpBatchInsert
		err = bdb.BatchInsert(ctx, w.Table, th.keys, th.vals[:batch])
		if err == nil {
			for _, n := range nums {
				seq.ack(n)
			}
		}
	}
	th.rec.record(op, time.Since(start))
	return int64(batch), err
}
