package storage

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// LSMStats is the shape of the store's LSM and the work pebble has done
// since Open: what flushes by ingestion and by batch cost the store (L0
// files, read amplification, compactions, bytes written). Counters count
// since the store was opened.
type LSMStats struct {
	// L0Files is the number of sstables in L0, L0Sublevels the number of
	// its sublevels (overlapping files stack up in sublevels; a point read
	// may search one file per sublevel).
	L0Files     int64
	L0Sublevels int
	// ReadAmp is pebble's read amplification: the number of memtables,
	// L0 sublevels and non-empty lower levels a point read may search.
	ReadAmp int
	// MemTables is the number of memtables, the mutable one included
	// (flushable ingests queued behind them count too).
	MemTables int64
	// Flushes, Compactions and Ingests count pebble's memtable flushes,
	// compactions and ingestions.
	Flushes, Compactions int64
	Ingests              uint64
	// FlushableIngests counts the ingestions that overlapped a memtable
	// and so were queued behind it as flushables, once flushed (pebble's
	// Flush.AsIngestCount): each lands in L0 when the memtables before it
	// are flushed, and is counted then.
	FlushableIngests uint64
	// WALBytes, FlushedBytes, CompactedBytes and IngestedBytes are the
	// bytes written to the write-ahead log, to tables by memtable flushes,
	// to tables by compactions, and of tables ingested (written by
	// Ingest). BytesWritten is their sum: everything the store wrote.
	WALBytes, FlushedBytes, CompactedBytes, IngestedBytes uint64
	BytesWritten                                          uint64
	// BackgroundJobs is the number of flushes and compactions in
	// progress (Store.BackgroundJobs).
	BackgroundJobs int64
	// LogBytes is the live data of the write-ahead log: what the
	// memtables hold that no flush has written to an sstable yet (0 after
	// a flush).
	LogBytes uint64
}

// LSM returns the store's LSM shape and write counters. Errors: kvbuf.ErrClosed.
func (s *Store) LSM() (LSMStats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return LSMStats{}, kverr.ErrClosed
	}
	return PebbleLSMStats(s.db.Metrics()), nil
}

// PebbleLSMStats returns the LSMStats of a pebble database's metrics, as
// Store.LSM reports its own: a benchmark compares a store with a raw
// pebble database by the same figures (BytesWritten counted alike).
func PebbleLSMStats(pm *pebble.Metrics) LSMStats {
	tot := pm.Total()
	st := LSMStats{
		L0Files:          pm.Levels[0].TablesCount,
		L0Sublevels:      int(pm.Levels[0].Sublevels),
		ReadAmp:          pm.ReadAmp(),
		MemTables:        pm.MemTable.Count,
		Flushes:          pm.Flush.Count,
		Compactions:      pm.Compact.Count,
		Ingests:          pm.Ingest.Count,
		FlushableIngests: pm.Flush.AsIngestCount,
		WALBytes:         pm.WAL.BytesWritten,
		FlushedBytes:     tot.TableBytesFlushed,
		CompactedBytes:   tot.TableBytesCompacted,
		IngestedBytes:    tot.TableBytesIngested,
		BackgroundJobs:   pm.Compact.NumInProgress + pm.Flush.NumInProgress,
		LogBytes:         pm.WAL.Size,
	}
	st.BytesWritten = st.WALBytes + st.FlushedBytes + st.CompactedBytes + st.IngestedBytes
	return st
}
