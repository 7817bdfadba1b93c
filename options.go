package kvbuf

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// DefaultIngestThreshold is the default Options.IngestThreshold: 4 MiB.
const DefaultIngestThreshold = 4 << 20

// DefaultReadTierBytes is the default Options.ReadTierBytes: 32 MiB.
const DefaultReadTierBytes = 32 << 20

// DefaultFlushQuantum is the default Options.FlushQuantum: 200µs.
const DefaultFlushQuantum = 200 * time.Microsecond

// Options configures an engine. A nil *Options means defaults; a zero field
// means that field's default. Open resolves them once (EnsureDefaults, then
// Validate); each default is declared once, in the package that uses it.
type Options struct {
	// FlushInterval is how long after the previous flush the background
	// flusher makes pending changes durable if nothing else has. Default:
	// flush.DefaultInterval (1s). Negative disables interval flushes;
	// explicit Flush, the pending-memory bound and Close still flush.
	//
	// A host that keeps its own log, synced at least as often as its loss
	// window, does not need interval flushes for that window: it replays
	// its log from Watermark()+1 after a crash. With them disabled the
	// engine flushes when half of MaxPendingBytes is held, in fewer and
	// larger generations, which leave the store fewer L0 tables to compact
	// (doc/design.md, "The store under a buffer"), and a reopen replays up
	// to MaxPendingBytes of the host's log (what is pending, and the
	// generations in flight: a generation waiting for the store's L0
	// holds its changes longer).
	FlushInterval time.Duration

	// MaxPendingBytes bounds the memory held by pending changes across all
	// keyspaces and bitslices. A write that finds it exceeded waits (with
	// its context) for a flush to make room; half of it starts a background
	// flush. Default: flush.DefaultMaxPendingBytes (64 MiB). Negative
	// disables both.
	MaxPendingBytes int64

	// PipelineDepth bounds the flush generations frozen but not yet durable:
	// generation N+1 may freeze and be written while N's sync is in flight.
	// Default: flush.DefaultPipelineDepth (4). 1 flushes one generation at a
	// time; negative values and values above flush.MaxPipelineDepth (64)
	// are ErrBadOptions.
	PipelineDepth int

	// GroupWait bounds how long a flush waits, when no sync is in flight,
	// for the callers released by the previous flush to join the next one
	// (group commit). It never waits with a single caller. Default:
	// flush.DefaultGroupWait. Negative disables the wait.
	GroupWait time.Duration

	// MaxKeySize is the largest KV key in bytes. Default:
	// buffer.DefaultMaxKeySize (4096); at most 64 KiB.
	MaxKeySize int

	// MaxValueSize is the largest KV value in bytes. Default:
	// buffer.DefaultMaxValueSize (1 MiB); at most 1 GiB.
	MaxValueSize int

	// MaxBits bounds a bitslice's length: Set of an index at or past it
	// fails with ErrOutOfRange. Default: buffer.DefaultMaxBits (2^32); at
	// most bitslice.MaxBits (2^40). A bitslice's pending-table directory
	// costs 8 bytes per 32768 bits up to the highest index set.
	MaxBits uint64

	// CacheSize is pebble's block cache in bytes. Default:
	// storage.DefaultCacheSize (8 MiB). Negative values are ErrBadOptions.
	CacheSize int64

	// PoolBytes bounds the memory of flushed tables kept for reuse by later
	// generations. Default: buffer.DefaultPoolBytes (8 MiB). Negative
	// disables pooling.
	PoolBytes int64

	// LogBeforeData makes the engine persist no watermark above the
	// highest op the host reported durable in its own log with
	// DB.LogDurable (starting at the watermark at Open). A host that
	// group-commits its log acknowledges op n only once the log is durable;
	// without this, an interval or size-triggered flush may persist
	// watermark n first, and after a power loss the watermark would be
	// ahead of the log, telling the host not to replay ops its log lost.
	// Default: false (the watermark is capped by nothing but completed
	// ops: for hosts whose log is durable before they write an op, and
	// for hosts without a log). It caps the watermark, not the data: see
	// the DB caveats.
	LogBeforeData bool

	// IngestThreshold is the size, in bytes of pending KV changes, from
	// which a flush generation is written straight into sstables and
	// ingested into the store (one DB.Ingest with the catalog and the
	// watermark: flush by ingestion) instead of committed as one batch
	// through the store's write-ahead log and memtable. A batch costs a
	// generation its WAL write, a memtable insert per change and, later,
	// pebble's flush of the memtable; an ingestion costs a manifest edit,
	// a new table in the LSM and a sync of its file, which is more for a
	// few changes. Default: DefaultIngestThreshold, chosen by measurement
	// (doc/design.md, "Flush by ingestion"). Negative: never ingest.
	IngestThreshold int64

	// ReadTierBytes is the memory budget of the read tier: the tables of
	// recently flushed generations, kept readable after they are durable
	// so that a key read again soon after its flush is answered from
	// memory rather than by a store read. Whole generations are evicted,
	// oldest first, to keep within the budget and at most four generations
	// (a read that misses the buffer probes each); a generation larger
	// than the budget is not kept. A generation's size in the tier is the
	// memory its tables hold once retained: a table given slot arrays for
	// many more keys than it took (a small generation after a large one)
	// is first compacted to its keys, unless even compacted the generation
	// is over the budget. The
	// tier's memory is reported in Metrics.ReadTierBytes, apart from
	// PendingBytes (it does not count against MaxPendingBytes). Default:
	// DefaultReadTierBytes. Negative disables the tier.
	ReadTierBytes int64

	// FlushQuantum bounds how long the flusher works on a generation's
	// tables (flush by ingestion) before it yields the processor to
	// readers waiting for it: Go would otherwise let it run for about 10ms
	// before preempting it, which is a read's tail latency on a machine
	// whose cores are all busy. Default: DefaultFlushQuantum. Negative:
	// never yield.
	FlushQuantum time.Duration

	// FlushCPUPercent caps the share of one core the flusher's work on a
	// generation's tables takes over time, in percent: after each
	// FlushQuantum of work it sleeps long enough to stay within it
	// (Metrics.FlushThrottled). It trades flush throughput (and so, under
	// a sustained write load, more time at MaxPendingBytes) for readers'
	// CPU. Below 100, a flush's sort and tables are also kept on the
	// flusher's goroutine (at 100, a large generation's take one
	// goroutine per processor but one, each yielding like the flusher;
	// see doc/design.md, "The flush on every processor"). Default: 100
	// (no sleep; the flusher only yields). At least 1, at most 100, else
	// ErrBadOptions.
	FlushCPUPercent int

	// MemoryBudget, if set, is shared with the other engines opened with
	// it: their pending bytes together stay under its size (see
	// MemoryBudget), besides each engine's own MaxPendingBytes. Past the
	// budget's high mark it flushes the engines its policy chooses; at its
	// size, writes of every engine wait (with their context) in one queue.
	// Close releases the engine's share. Open fails with ErrBudgetClosed
	// for a closed budget. Default: nil, the engine alone.
	MemoryBudget *MemoryBudget

	// WatchBufferBytes bounds the memory of the change feed (DB.Watch):
	// the changes it holds for watches, resolved or not. Beyond it the
	// oldest durable changes are dropped (a watch that had not read them
	// ends with ErrLagged, unless the store retains them (WatchRetain) and
	// it reads on there; a watch may no longer start there but from the
	// store, else ErrCompacted), and if the changes of ops not yet complete outgrow it
	// alone (an op held open while others write) every watch lags.
	// Changes not yet durable are not dropped for the bound: they are
	// bounded by MaxPendingBytes. Default: DefaultWatchBufferBytes;
	// negative is ErrBadOptions. Costs nothing until the feed records.
	WatchBufferBytes int64

	// WatchFromOpen makes the engine record every change for DB.Watch from
	// Open, so that a watch may start at any op above the watermark at
	// Open that the feed still holds (a Snapshot's Op()+1, a subscriber's
	// last resolved op + 1). Without it the engine records from the first
	// Watch call on, and a watch may start only at ops begun after it.
	// Recording costs every write a copy of its change. Default: false.
	WatchFromOpen bool

	// WatchRetain keeps the change feed's changes in the store, written in
	// the same flush as the data they belong to (the same batch or ingest
	// as its watermark), so that a watch may resume after a restart, a
	// crash included, from any op the store still retains: DB.Watch from
	// an op below what memory holds reads the retained changes, then goes
	// on with the live feed. Retention implies WatchFromOpen. Default:
	// nil, nothing retained. See WatchRetention.
	WatchRetain *WatchRetention

	// storeTune, if set, replaces the store options the engine chooses
	// (storageOptions; CacheSize is still the engine's): benchmarks of
	// this package compare store set-ups with it. A pointer, so that
	// Options stays comparable.
	storeTune *storage.Options

	// noL0Wait, for benchmarks of this package, ingests without waiting
	// for the store's L0 (storage.Store.WaitL0).
	noL0Wait bool

	// flushBytes is flush.Options.FlushBytes (0: its default, half of
	// MaxPendingBytes): benchmarks of this package compare generation
	// sizes with it.
	flushBytes int64

	// ingestWriters is buffer.Options.IngestWriters (0: its default, one
	// goroutine per processor but one): benchmarks of this package
	// compare a flush on every processor with the default.
	ingestWriters int

	// storeFS is the file system the pebble store lives on; nil means the
	// OS's, with the engine directory's modes (see storeFSOrOS). It is a
	// fault-injection seam for this package's tests (vfs.NewCrashableMem,
	// errorfs) and deliberately unexported: the manifest, lock and
	// bitslices always use the OS file system.
	storeFS vfs.FS

	// hooks are this package's test seams; nil in production.
	hooks *testHooks
}

// testHooks let a test act at a chosen point of the engine's protocols.
// Each is called, when not nil, on the goroutine that reaches the point.
type testHooks struct {
	// checkpointListed is called once Checkpoint has listed the
	// bitslices it copies, with flushes held off (writeMu held).
	checkpointListed func()
	// diskRetryMax caps the wait between retries of a store write on a
	// full disk (default: diskfull's, 1s).
	diskRetryMax time.Duration
	// l0Waiting is called when a flush by ingestion begins to wait for
	// the store's L0 (storage.Store.WaitL0).
	l0Waiting func()
}

// storeFSOrOS returns the store's file system: storeFS, or the OS's
// creating directories and files with the engine directory's private modes
// (enginedir.DirMode, FileMode) where pebble would make them 0755 and 0644.
func (o *Options) storeFSOrOS() vfs.FS {
	if o.storeFS != nil {
		return o.storeFS
	}
	return fsutil.ModeFS(enginedir.DirMode, enginedir.FileMode)
}

// EnsureDefaults returns a copy of o (nil = all defaults) with every zero
// field set to its default, so that callers can read the values an engine
// opened with o uses.
func (o *Options) EnsureDefaults() *Options {
	var r Options
	if o != nil {
		r = *o
	}
	setDefault(&r.FlushInterval, flush.DefaultInterval)
	setDefault(&r.MaxPendingBytes, flush.DefaultMaxPendingBytes)
	setDefault(&r.PipelineDepth, flush.DefaultPipelineDepth)
	setDefault(&r.GroupWait, flush.DefaultGroupWait)
	setDefault(&r.MaxKeySize, buffer.DefaultMaxKeySize)
	setDefault(&r.MaxValueSize, buffer.DefaultMaxValueSize)
	setDefault(&r.MaxBits, buffer.DefaultMaxBits)
	setDefault(&r.CacheSize, storage.DefaultCacheSize)
	setDefault(&r.PoolBytes, buffer.DefaultPoolBytes)
	setDefault(&r.IngestThreshold, DefaultIngestThreshold)
	setDefault(&r.ReadTierBytes, DefaultReadTierBytes)
	setDefault(&r.FlushQuantum, DefaultFlushQuantum)
	setDefault(&r.FlushCPUPercent, 100)
	setDefault(&r.WatchBufferBytes, DefaultWatchBufferBytes)
	if r.WatchRetain != nil {
		wr := *r.WatchRetain
		setDefault(&wr.MaxBytes, DefaultWatchRetainBytes)
		r.WatchRetain = &wr
	}
	return &r
}

// setDefault sets *p to d when *p is its type's zero value: a zero field of
// Options means "the default".
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate reports an error wrapping ErrBadOptions for a value out of range.
func (o *Options) Validate() error {
	// Each layer validates its own options, so a range is stated once,
	// where the value is used; the root only adds what is its own.
	r := o.EnsureDefaults()
	if r.FlushCPUPercent < 1 || r.FlushCPUPercent > 100 {
		return kverr.Errorf("FlushCPUPercent %d (1 to 100): %w", r.FlushCPUPercent, ErrBadOptions)
	}
	if r.WatchBufferBytes < 0 {
		return kverr.Errorf("WatchBufferBytes %d (negative): %w", r.WatchBufferBytes, ErrBadOptions)
	}
	if err := r.WatchRetain.validate(); err != nil {
		return err
	}
	if err := r.bufferOptions().Validate(); err != nil {
		return err
	}
	if err := r.flushOptions(0, 0).Validate(); err != nil {
		return err
	}
	return r.storageOptions().Validate()
}

// The store set up for a buffer in front of it (doc/design.md, "The store
// under a buffer"): the engine's writes reach pebble as large ingested
// tables and small WAL batches, and the hot set is read from the buffer
// and the read tier. The L0 compaction threshold is pebble's (4): pebble
// compacts L0 once twice its sublevels reach the threshold, so L0 is
// compacted into the base level once two sublevels stack up, not as each
// table lands; a compaction of L0 rewrites every base-level table it
// overlaps, which scattered keys make all of them, and at 2 (one
// sublevel) YCSB B wrote
// twice the bytes per user byte (doc/bench/2026-12-07-storel0_29) with no
// better read latency. The memtable stays small (pebble's 4 MiB: it holds
// only small generations, and each ingestion that overlaps it rotates it
// anyway), and so does compaction concurrency (one: the cores are the
// readers' and the flusher's).
const (
	storeL0CompactionThreshold = 4
	storeL0StopWritesThreshold = 12
	storeMaxCompactions        = 1
)

// storageOptions are the store options the engine opens its store with
// (the file system and the existence checks are set by open).
func (o *Options) storageOptions() *storage.Options {
	so := &storage.Options{
		CacheSize:                o.CacheSize,
		L0CompactionThreshold:    storeL0CompactionThreshold,
		L0StopWritesThreshold:    storeL0StopWritesThreshold,
		MaxConcurrentCompactions: storeMaxCompactions,
	}
	if o.storeTune != nil {
		so = new(*o.storeTune)
		so.CacheSize = o.CacheSize
	}
	return so
}

func (o *Options) bufferOptions() *buffer.Options {
	bo := &buffer.Options{
		MaxKeySize:    o.MaxKeySize,
		MaxValueSize:  o.MaxValueSize,
		PoolBytes:     o.PoolBytes,
		MaxBits:       o.MaxBits,
		IngestWriters: o.ingestWriters,
	}
	if o.FlushCPUPercent > 0 && o.FlushCPUPercent < 100 {
		// The cap is a share of one core, kept by the pacer of the
		// flusher's goroutine: the flush's sort and tables stay on it.
		bo.IngestWriters = 1
	}
	return bo
}

func (o *Options) flushOptions(wm, highest uint64) *flush.Options {
	return &flush.Options{
		Interval:        o.FlushInterval,
		MaxPendingBytes: o.MaxPendingBytes,
		FlushBytes:      o.flushBytes,
		PipelineDepth:   o.PipelineDepth,
		GroupWait:       o.GroupWait,
		Watermark:       wm,
		HighestOp:       highest,
		LogBeforeData:   o.LogBeforeData,
	}
}
