package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Defaults of Options fields, documented on the fields.
const (
	// DefaultCacheSize is the default Options.CacheSize.
	DefaultCacheSize    = 8 << 20
	defaultMemTableSize = 4 << 20
	// DefaultBloomBitsPerKey is the default Options.BloomBitsPerKey.
	DefaultBloomBitsPerKey = 10
	// pebble's defaults of the L0 thresholds (pebble.Options.EnsureDefaults).
	pebbleL0CompactionThreshold = 4
	pebbleL0StopWritesThreshold = 12
	// maxBloomBitsPerKey bounds Options.BloomBitsPerKey: past it a filter
	// only costs space (its false-positive rate is below one in a million).
	maxBloomBitsPerKey = 64
)

// Options configures a Store. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// FS is the filesystem the store lives on. Default: vfs.Default (the OS
	// filesystem). Tests use vfs.NewMem().
	FS vfs.FS

	// Logger receives pebble's log output. Default: a logger that discards
	// Infof and Errorf (pebble's own default prints to stderr) and, like
	// pebble's, prints Fatalf and exits: pebble calls Fatalf only when it
	// cannot continue safely.
	Logger pebble.Logger

	// CacheSize is the block cache size in bytes. Default: 8 MiB (pebble's
	// default too). Negative values are kvbuf.ErrBadOptions.
	CacheSize int64

	// MemTableSize is the size of one pebble memtable in bytes; batches
	// larger than about half of it bypass the memtable. Default: 4 MiB
	// (pebble's default too).
	MemTableSize uint64

	// BloomBitsPerKey sizes the Bloom filter written into every sstable
	// (every level, L0 included), in bits per key: a point read skips a
	// table whose filter rules the key out instead of searching its index
	// and data blocks. A flush in generations leaves several overlapping
	// L0 tables until pebble compacts them, and a read of a key that is
	// not pending otherwise searches each of them. Default: 10 (about 1%
	// false positives, 1.25 bytes per key). Negative: no filters (pebble's
	// own default). At most 64, else kvbuf.ErrBadOptions. Tables written earlier
	// keep what they were written with.
	BloomBitsPerKey int

	// FormatMajorVersion is the pebble on-disk format a new store is created
	// at, and the one an older store is upgraded to on a writable open.
	// Default: pebble.FormatNewest. Ignored when ReadOnly is set (a read-only
	// open never upgrades).
	FormatMajorVersion pebble.FormatMajorVersion

	// ReadOnly opens an existing store without writing to it (kvtool
	// inspect). Commit, Apply and Flush return kvbuf.ErrReadOnly. Opening a
	// missing store fails with an error wrapping fs.ErrNotExist. Default:
	// false.
	ReadOnly bool

	// ErrorIfExists makes Open fail with an error wrapping fs.ErrExist if a
	// store already exists in the directory. Default: false.
	ErrorIfExists bool

	// ErrorIfNotExists makes Open fail with an error wrapping fs.ErrNotExist
	// instead of creating a new store. Default: false.
	ErrorIfNotExists bool

	// L0CompactionThreshold sets when pebble starts compacting L0 into the
	// levels below: once twice L0's sublevels reach it (or L0 holds
	// pebble's L0CompactionFileThreshold files, 500), so 2 compacts every
	// L0 table as it lands and pebble's default (4) waits for two
	// sublevels. Default: pebble's (4). Negative values are
	// kvbuf.ErrBadOptions.
	L0CompactionThreshold int

	// L0StopWritesThreshold is the L0 read amplification at which pebble
	// stops writes (commits and memtable flushes wait for compactions).
	// Default: pebble's (12). Negative values, and values below
	// L0CompactionThreshold (after defaults), are kvbuf.ErrBadOptions.
	L0StopWritesThreshold int

	// MaxConcurrentCompactions bounds pebble's concurrent compactions.
	// Default: 1 (pebble's). Negative values are kvbuf.ErrBadOptions.
	MaxConcurrentCompactions int

	// L0CompactionConcurrency is the number of L0 sublevels per
	// compaction beyond the first that pebble runs at once (pebble's
	// Experimental.L0CompactionConcurrency): with MaxConcurrentCompactions
	// n above 1, pebble starts a second compaction only once L0 holds this
	// many sublevels (or its compaction debt passes 1 GB), a third at
	// twice as many, and so on up to n. Default: pebble's (10), which
	// leaves a second compaction idle until L0's read amplification is
	// near the stop-writes threshold. Negative values are
	// kvbuf.ErrBadOptions.
	L0CompactionConcurrency int

	// IngestTableFormat is the sstable format of the tables an Ingest
	// writes (a flush by ingestion), if below the store's own format (the
	// store's own is used otherwise): pebble reads every format from
	// sstable.TableFormatMinSupported on and rewrites an ingested table
	// in the store's own format at its first compaction. The row-block
	// formats (sstable.TableFormatPebblev4 and below) cost the writer
	// less CPU than the columnar ones at about the same size
	// (BenchmarkIngestWriter). Default (0): the store's own format.
	// Values between 0 and sstable.TableFormatMinSupported, or above
	// sstable.TableFormatMax, are kvbuf.ErrBadOptions.
	IngestTableFormat sstable.TableFormat

	// ingestSplit selects the design of ingested tables (see ingester.split):
	// 0 writes one table per ingest. Benchmarks of this package compare
	// the designs.
	ingestSplit uint64

	// noAutoCompactions, for tests only, opens pebble with automatic
	// compactions off, so that a test can look at the tables its flushes
	// and ingests made before a compaction merges them.
	noAutoCompactions bool
}

func ingestFormat(o *Options) sstable.TableFormat {
	if o == nil {
		return 0
	}
	return o.IngestTableFormat
}

func ingestSplit(o *Options) uint64 {
	if o == nil {
		return 0
	}
	return o.ingestSplit
}

// quietLogger is the default Logger: pebble's default writes informational
// messages to stderr, which an embedded engine must not do.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}

// Fatalf keeps pebble's behaviour (print, exit): pebble calls it when
// continuing would risk the data, and it does not expect it to return.
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// PebbleOptions returns the pebble options Open uses for opts (nil means
// defaults; opts must pass Validate), as a new value on each call: benchmarks open their raw pebble
// baseline with it to be configured exactly like the store. Besides the
// Options fields it installs a DataCorruption event handler that logs to
// Logger.Errorf, replacing pebble's default, which calls Logger.Fatalf and
// so exits on the first corrupt block read: the read returns the error
// instead (kvbuf.ErrCorruptBlock from the Store). Open also sets Lock, because it
// takes the directory lock itself.
func PebbleOptions(opts *Options) *pebble.Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	po := &pebble.Options{
		FS:                 o.FS,
		Logger:             o.Logger,
		CacheSize:          o.CacheSize,
		MemTableSize:       o.MemTableSize,
		FormatMajorVersion: o.FormatMajorVersion,
		ReadOnly:           o.ReadOnly,
		ErrorIfExists:      o.ErrorIfExists,
		ErrorIfNotExists:   o.ErrorIfNotExists,
	}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if po.Logger == nil {
		po.Logger = quietLogger{}
	}
	logger := po.Logger
	po.EventListener = &pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			logger.Errorf("storage: on-disk corruption: %s", info)
		},
	}
	if po.CacheSize == 0 {
		po.CacheSize = DefaultCacheSize
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = defaultMemTableSize
	}
	po.L0CompactionThreshold = o.L0CompactionThreshold
	po.L0StopWritesThreshold = o.L0StopWritesThreshold
	if n := o.MaxConcurrentCompactions; n > 0 {
		po.CompactionConcurrencyRange = func() (int, int) { return 1, n }
	}
	po.Experimental.L0CompactionConcurrency = o.L0CompactionConcurrency
	bitsPerKey := o.BloomBitsPerKey
	if bitsPerKey == 0 {
		bitsPerKey = DefaultBloomBitsPerKey
	}
	if bitsPerKey > 0 {
		for i := range po.Levels {
			po.Levels[i].FilterPolicy = bloom.FilterPolicy(bitsPerKey)
		}
	}
	if po.ReadOnly {
		po.FormatMajorVersion = 0 // keep the store's own version
	} else if po.FormatMajorVersion == 0 {
		po.FormatMajorVersion = pebble.FormatNewest
	}
	return po
}

// Validate reports an error wrapping kvbuf.ErrBadOptions for a value out of range
// (a nil *Options is valid). Open calls it; PebbleOptions trusts its input.
func (o *Options) Validate() error {
	if o != nil && o.CacheSize < 0 {
		return kverr.Errorf("CacheSize %d: %w", o.CacheSize, kverr.ErrBadOptions)
	}
	if f := ingestFormat(o); f != 0 && (f < sstable.TableFormatMinSupported || f > sstable.TableFormatMax) {
		return kverr.Errorf("IngestTableFormat %d (0, or %d to %d): %w", f, sstable.TableFormatMinSupported, sstable.TableFormatMax, kverr.ErrBadOptions)
	}
	if o != nil && o.BloomBitsPerKey > maxBloomBitsPerKey {
		return kverr.Errorf("BloomBitsPerKey %d (at most %d): %w", o.BloomBitsPerKey, maxBloomBitsPerKey, kverr.ErrBadOptions)
	}
	if o != nil {
		if o.L0CompactionThreshold < 0 || o.L0StopWritesThreshold < 0 || o.MaxConcurrentCompactions < 0 || o.L0CompactionConcurrency < 0 {
			return kverr.Errorf("L0CompactionThreshold %d, L0StopWritesThreshold %d, MaxConcurrentCompactions %d, L0CompactionConcurrency %d (none negative): %w",
				o.L0CompactionThreshold, o.L0StopWritesThreshold, o.MaxConcurrentCompactions, o.L0CompactionConcurrency, kverr.ErrBadOptions)
		}
		compact, stop := o.L0CompactionThreshold, o.L0StopWritesThreshold
		if compact == 0 {
			compact = pebbleL0CompactionThreshold
		}
		if stop == 0 {
			stop = pebbleL0StopWritesThreshold
		}
		if stop < compact {
			return kverr.Errorf("L0StopWritesThreshold %d below L0CompactionThreshold %d: %w", stop, compact, kverr.ErrBadOptions)
		}
	}
	return nil
}
