// Package failpoint lets tests stop kvbuf at named points in its I/O paths:
// return an injected error (an msync that fails, a disk that is full during
// growth), panic, or kill the process there (a crash between the data msync
// and the header write).
//
// Instrumented code calls Hit(name) and, where the point can fail, returns
// the error it gets. In a normal build (without the kvbuf_failpoints build
// tag) Hit is an empty function returning nil that the compiler inlines
// away: production binaries carry no hook, no lock and no global state. Built
// with -tags kvbuf_failpoints, Enable installs a callback for a point.
//
// # Caveats
//
//   - With the tag, the callbacks live in one process-wide table: tests that
//     enable points must not run in parallel with each other.
//   - A point fires for every file that reaches it; a callback that must
//     fire once counts its calls itself.
//   - Only the points named by the constants below exist. A point's error
//     reaches the caller of the instrumented function wrapped with %w.
//
// # Syncs
//
// The code that syncs a file or a directory of the OS file system (the
// bitslices, the engine directory's manifest and lock, a checkpoint's
// copies, directory fsyncs) reports each successful sync with FileSynced
// or DirSynced, so that a power-cut simulation (the engine's
// TestCrashPowerCut) knows what a cut would keep: what was synced, and
// nothing certain of what was written since. Without the tag both are
// empty functions. The sync boundaries of the protocols are points
// (Hit) like the others, named below; a point added for a new protocol step
// (flush by sstable ingestion: the sstable write, its sync, the ingest)
// joins the simulation by being listed in that test's points.
package failpoint

import "os"

// SyncObserver is told of every successful sync the instrumented code
// makes (see "Syncs"). Its methods run on the goroutine that synced, with
// the instrumented code's locks held, and must not call back into it.
type SyncObserver interface {
	// FileSynced: the bytes [off, off+n) of f (the whole file if n < 0)
	// are durable. f may be open for writing only.
	FileSynced(f *os.File, off, n int64)
	// DirSynced: the entries of directory dir are durable.
	DirSynced(dir string)
}

// The points. Each is named "package/function/where".
const (
	// BitsliceSyncMsync is in bitslice.File.Sync before the data msync,
	// and at the start of bitslice.File.SyncLagged; an error fails the sync
	// as a failed msync would.
	BitsliceSyncMsync = "bitslice/sync/before-msync"
	// BitsliceSyncHeader is in bitslice.File.Sync after the data msync and
	// before the header slot is written: a crash here leaves new data under
	// the old header (and old watermark). In SyncLagged it is before the
	// header slot is written, with the data not synced yet. An error fails
	// the sync.
	BitsliceSyncHeader = "bitslice/sync/before-header"
	// BitsliceGrowAllocate is in bitslice.File.Grow before the new blocks
	// are allocated; an error (say, syscall.ENOSPC) fails the Grow as a full
	// disk would.
	BitsliceGrowAllocate = "bitslice/grow/before-allocate"
	// BitsliceGrowHeader is in bitslice.File.Grow after the file is
	// extended, zeroed and msynced, before the header with the new length is
	// written. An error fails the Grow.
	BitsliceGrowHeader = "bitslice/grow/before-header"
	// BitsliceApplyWords is in bitslice.File.ApplyWords, ApplyMasked and
	// WriteWords after half of the word changes are stored: a crash point
	// only (its error is ignored, since they validate everything before
	// they write).
	BitsliceApplyWords = "bitslice/apply-words/midway"
	// BitsliceWriteWords is in bitslice.File.WriteWords before the pwrite
	// of the second half of its words (after BitsliceApplyWords): an error
	// fails the call as a failed pwrite would (EIO), the first half
	// written: a torn apply that returns an error.
	BitsliceWriteWords = "bitslice/write-words/before-pwrite"
	// FlushBitsHeader is in the engine's flush after a bitslice's write
	// (BitsGen.WriteLagged) returned: its words and a header recording the
	// generation are durable, the bitslice catalog and the store's batch
	// with the watermark not yet written. An error fails the flush as a
	// failed store commit would (the generation stays pending and is
	// written again); a crash here leaves the file a generation ahead of
	// the catalog and its words ahead of the watermark.
	FlushBitsHeader = "kvbuf/flush/after-bitslice-header"
	// CheckpointCopy is in the engine's Checkpoint before each bitslice
	// file is copied; an error (say, syscall.ENOSPC) fails the copy as a
	// full disk would.
	CheckpointCopy = "kvbuf/checkpoint/copy-bitslice"
	// EnginedirManifest is in the engine directory's manifest write
	// (initialising, ready, upgrade) before the temporary file is written;
	// an error fails the write as a full disk would.
	EnginedirManifest = "enginedir/manifest/write"

	// Sync boundaries that are crash points only (an error fails the step
	// where noted).

	// BitsliceSyncDone is in bitslice.File.Sync (and SyncLagged) after the header's
	// fdatasync returned: the new header and the data are durable, the
	// caller not yet told. Its error is ignored.
	BitsliceSyncDone = "bitslice/sync/after-header"
	// BitsliceSyncHeaderWritten is in bitslice.File.SyncLagged after the
	// header slot is written and before the one fdatasync: a power cut
	// here may keep the header, any of the data pages, both or neither.
	// Its error is ignored.
	BitsliceSyncHeaderWritten = "bitslice/sync-lagged/header-written"
	// BitsliceCreatePublish is in bitslice.CreateOwned after the new file
	// (allocated, header written, fsynced) is complete under its temporary
	// name and before it is renamed into place; an error fails the Create.
	BitsliceCreatePublish = "bitslice/create/before-publish"
	// BitsliceCreateDirSync is in bitslice.CreateOwned after the rename,
	// before the directory fsync; an error fails the Create.
	BitsliceCreateDirSync = "bitslice/create/before-dirsync"
	// EnginedirManifestRename is in the manifest write after the temporary
	// file is synced, before it is renamed over the manifest; an error
	// fails the write.
	EnginedirManifestRename = "enginedir/manifest/before-rename"
	// CheckpointReady is in the engine's Checkpoint after the copy is
	// complete (files copied and restamped, directory synced), before its
	// manifest says ready; an error fails the Checkpoint.
	CheckpointReady = "kvbuf/checkpoint/before-ready"
)
