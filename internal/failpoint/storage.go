package failpoint

// Points of the store's ingestion path (storage.Ingest and
// Store.CommitIngest). They sit where a crash leaves a distinct state: an
// sstable written but not synced, synced but not handed to pebble, and
// ingested but not yet reported.
const (
	// StorageIngestSync is in storage.Ingest after an sstable's last block
	// is written and before the file is synced and closed: a crash here
	// leaves a partial, unsynced file in the store's ingest directory. An
	// error fails the ingest (nothing of it reaches the store).
	StorageIngestSync = "storage/ingest/before-sync"
	// StorageIngestApply is in Store.CommitIngest's ingestion, after every
	// earlier commit is durable and the ingest's files are synced, before
	// pebble's DB.Ingest: a crash here leaves complete files that are not
	// part of the store. An error fails the ingest as a failed
	// DB.Ingest would.
	StorageIngestApply = "storage/ingest/before-apply"
	// StorageIngestApplied is right after pebble's DB.Ingest returned nil,
	// before the ingest's commit is reported durable: a crash point (its
	// error is ignored, as the ingest is in the store by then).
	StorageIngestApplied = "storage/ingest/after-apply"
)
