// Package bitslice is a fixed-format, mmap-backed bit vector stored in one
// file. It is the durable floor under kvbuf's pending-changes buffer: reads
// are a couple of atomic loads on the mapped words, writes are atomic
// read-modify-writes on the same words, and Sync makes them durable before
// it records the caller's watermark. It is usable on its own, without the
// engine. Its errors are the module's sentinels, which only the root
// package exports: test them with errors.Is against kvbuf.ErrCorruptBits,
// kvbuf.ErrLocked and so on (see Errors).
//
// # Errors
//
// The package exports no error names. Every error it returns is, or wraps,
// one of the module's sentinels, exported by the root package
// github.com/kvbuf/kvbuf; test them with errors.Is against the root's
// names. Their texts start with "kvbuf: " once.
//
//   - kvbuf.ErrCorruptBits (which matches kvbuf.ErrCorrupt): Open and
//     ReadInfo, for a file that is not a valid bitslice:
//     wrong magic or version, bad checksums in both header slots, a file
//     shorter than its header says, absurd sizes.
//   - kvbuf.ErrLocked: Open, when another open file description (in this
//     process or another) holds the file's lock.
//   - kvbuf.ErrClosed: every method that needs the file, after Close.
//   - kvbuf.ErrOutOfRange: Set, ApplyWords and Grow, for a bit or word
//     index at or past Len, a length above MaxBits, and unsorted ApplyWords
//     input (which cannot be range-checked in one pass); Create and
//     CreateOwned for a length above MaxBits.
//
// # On-disk format (version 2)
//
// All integers are little-endian.
//
//	offset 0      header slot 0 (64 bytes)
//	offset 2048   header slot 1 (64 bytes)
//	offset 4096   data: ceil(Len/64) uint64 words; bit i is bit i%64 of word i/64
//
// The rest of the 4096-byte header area is zero and ignored. The two slots
// sit in different 512-byte sectors so that a torn write can damage at most
// one of them. A slot is:
//
//	0:8    magic "KVBUFBIT"
//	8:12   format version (2)
//	12:16  data offset (4096)
//	16:24  sequence number (>= 1; slot = (seq-1) % 2)
//	24:32  length in bits (<= MaxBits)
//	32:40  persisted watermark (host operation number)
//	40:48  owner: the id of the engine the file belongs to (0: none)
//	48:56  write generation: the owner's number for the last update
//	56:60  reserved, zero
//	60:64  CRC-32C (Castagnoli) of bytes 0:60
//
// Version 1 is the same without owner and generation (40:60 reserved,
// zero). This package reads both; a version-1 file reads with owner and
// generation 0, and its first Sync or Grow rewrites its header as version
// 2. Readers of version 1 only refuse a version-2 file as corrupt (a newer
// format), never misread it.
//
// The owner and the generation let the owner recognise its own files: an
// engine stamps every file it creates with its id (CreateOwned), records
// the generation of each update (SetGen, then Sync) and keeps both, with the
// length, in its own catalog, so that a missing file, an older copy of it
// (a lower generation) or another engine's file is refused instead of
// silently read.
//
// Slots are written alternately, as bbolt and LMDB write their meta pages:
// every header update writes sequence number seq+1 into the slot that does
// not hold the current header, with pwrite followed by fdatasync; it never
// goes through the mapping. Open uses the valid slot with the highest
// sequence number, so a header write torn by a crash or a SIGKILL leaves the
// previous header in charge. Only when neither slot is valid is the file
// reported as corrupt. A slot whose checksum is good but whose version is
// not 1 or 2 fails the whole Open (it was written by a newer format;
// falling back to the older slot would silently lose its updates).
//
// The file may be longer than the data the header describes (a Grow that
// crashed after extending the file); those bytes are zeroed by the next Grow
// before the header claims them. Bits of the last word at or past Len are
// ignored by every read and cleared by Grow.
//
// # Durability protocol
//
// Sync msyncs the data pages, then writes the next header slot carrying the
// watermark staged with SetWatermark, then fdatasyncs. The persisted
// watermark is therefore never ahead of the data it covers. When only the
// generation or the owner changed (the watermark did not), the header is
// written first and one fdatasync makes it and the data durable: it claims
// nothing about the data.
//
// SyncLagged is the one-fdatasync form for an owner that keeps its own
// durable receipt (kvbuf's engine keeps its watermark in its store): it
// writes the next header slot first, then one fdatasync makes the header
// and the data durable together. A crash during that fdatasync may keep
// the new header and lose data pages, so (rule L1) its header records the
// staged generation and owner, which claim nothing about the data, and
// only the watermark staged when the previous successful Sync or
// SyncLagged began, whose changes that sync made durable. The persisted
// watermark therefore lags one SyncLagged behind the staged one, and is
// still never ahead of the data. Grow extends the
// file with real blocks (fallocate, or written zeros where fallocate is not
// supported, never a sparse truncate that could SIGBUS on a full disk),
// fsyncs, maps, zeroes and msyncs the new words, and only then writes a
// header with the new length. Create builds the file under a temporary name
// and renames it into place without replacing (renameat2 RENAME_NOREPLACE,
// or link and unlink where that is unsupported), so a crash during Create leaves either no
// file or a complete one (plus, at worst, a stray ".<name>.creating-*" file).
//
// # Concurrency
//
// Get, Word and CountOnes take no lock: they load an atomic pointer to an
// immutable view (mapping, length) and read the word with sync/atomic. Set
// and ApplyWords take the read side of a RWMutex only so that Close can
// wait for in-flight writes. Grow publishes a new view; when it needs a
// larger mapping it maps anew and keeps the superseded mapping alive until
// Close, and after it while a View of it is reachable (the mappings are
// reserved with room to grow in power-of-two steps, so this is rare and the
// superseded mappings total less than the live one).
// Shared file mappings of the same pages are coherent, so a writer still
// holding an old view writes the same page-cache pages.
//
// Close releases the lock (flock LOCK_UN) and closes the descriptor, and
// leaves every mapping of the file in place: a mapping is unmapped by a
// runtime cleanup once no View refers to it, before or after Close. A reader
// that loaded a View just before Close therefore reads the file's words
// through it (a read linearizable before Close), never zeros and never an
// unmapped page; one that loads the view after Close finds none and reads
// as empty.
//
// # Locking
//
// Create and Open take an exclusive flock on the file. A second Open of the
// same file, from this or another process, fails with kvbuf.ErrLocked. ReadInfo
// takes no lock and maps nothing; it may observe a file mid-update.
//
// # Caveats
//
//   - Durability is only what Sync promises: Close does not sync, and writes
//     since the last Sync may or may not be on disk after a power failure
//     (they survive a process crash, being in the page cache).
//   - The header and data are checksummed separately: the header has a CRC,
//     the data has none. Bit rot in the data is not detected.
//   - ApplyWords is all-or-nothing with respect to validation
//     (ranges and sort order), not with respect to crashes: a crash
//     mid-apply may leave some changes on disk and not others. The watermark
//     protocol is what lets the host replay them.
//   - Concurrent Set calls on bits of the same word are safe (atomic OR/AND),
//     but ApplyWords is not a transaction: a concurrent reader may
//     see some of a batch's bits before others.
//   - The flock is advisory. A process that ignores it, or a file copied or
//     rewritten behind the engine's back, is not defended against, and
//     truncating the file while it is open may crash the process (SIGBUS).
//   - Little-endian hosts with 4 KiB pages only (the data area is mapped
//     at offset 4096 and read as native words); Open says so elsewhere.
//   - A Sync that records only a new generation or owner relies on
//     fdatasync writing back the pages dirtied through the shared mapping
//     (Linux and the BSDs do). Where it does not, a crash may leave that
//     header over older data, which its unchanged watermark does not cover.
//   - Unix only (mmap, flock); fallocate is used on Linux, written zeros
//     elsewhere. Create needs RENAME_NOREPLACE or hard links.
//   - Lengths are capped at MaxBits (2^40 bits, 128 GiB of data).
//   - Close does not unmap: each mapping of the file goes when the garbage
//     collector finds no View of it reachable, so a View (or a reader of it)
//     kept after Close keeps the file's inode, its page-cache pages and its
//     address space mapped, and, if the file was removed, its blocks
//     allocated, and its file system busy (an unmount fails), until it is
//     dropped and collected. Such a View reads the file's current
//     words, a later opener's writes included; another process truncating
//     the file under it may crash the process (SIGBUS), as under any open
//     File.
package bitslice
