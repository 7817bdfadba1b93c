// Package enginedir owns a kvbuf engine directory: its layout, the manifest
// that marks it, the lock that makes one engine its only writer, the rules
// for bitslice and keyspace names, and the encodings of the keyspace and
// bitslice catalogs and of the engine id.
// The engine (package kvbuf) and kvtool share it, so neither parses the
// manifest or knows the format number on its own. Its errors wrap
// internal/kverr's sentinels (kverr.ErrNotEngine, kverr.ErrCorruptDir,
// kverr.ErrLocked, kverr.ErrBadName), which the root exports as
// kvbuf.ErrNotEngine and so on.
//
// # Layout
//
//	KVBUF       the manifest: "kvbuf engine directory\nformat 2\n" when the
//	            engine is complete (ready), the same followed by
//	            "initialising\n" while store/ and bits/ may be missing
//	            ("format 1": an engine made before engine ids and the
//	            bitslice catalog, read, upgraded by Dir.Upgrade)
//	LOCK        flocked exclusively by the engine that has the directory
//	            open; LOCK files made by this package hold
//	            "kvbuf engine lock\n", older engines made empty ones
//	store/      the pebble store
//	bits/       one NAME.bits file per bitslice
//	LOCK.tmp.*  a LOCK being made (unique name per opener)
//	KVBUF.tmp.* a manifest being written (unique name per writer)
//	KVBUF.tmp   older engines' temporary manifest
//
// The temporary files are only ever left behind by a crash; Open removes
// them once it holds the lock.
//
// # Opening: the protocol
//
//  1. Create the directory if it is absent, with its missing parents (and
//     sync the parent of every directory made, up to the closest one that
//     existed: a power cut keeps no entry that was not synced). A path
//     that exists and is not a directory is kverr.ErrNotEngine.
//  2. Classify it without the lock, writing nothing. A KVBUF manifest
//     decides: ready, initialising, damaged or newer (kverr.ErrCorruptDir), or
//     foreign (kverr.ErrNotEngine; but a foreign, empty or garbage KVBUF next to
//     store/ and bits/ directories, which only kvbuf makes and only after
//     its manifest, is a damaged engine: kverr.ErrCorruptDir, as is a directory
//     with store/ and bits/ and no KVBUF). Without one, the directory may hold only what
//     an interrupted initialisation leaves: a LOCK file holding kvbuf's
//     text, temporary files, or nothing. Anything else, a LOCK that kvbuf
//     did not write (an empty one, say) included, is kverr.ErrNotEngine, and the
//     directory is left as it was.
//  3. Lock. If LOCK exists, open it and flock it (LOCK_EX|LOCK_NB; if
//     another engine holds it: kverr.ErrLocked), then check that the name LOCK
//     still refers to the file just locked (if not, start again at 2). If
//     LOCK does not exist, create LOCK.tmp.<random> (O_EXCL), flock it,
//     write kvbuf's text into it, fsync it, and publish it as LOCK with a
//     rename that does not replace (renameat2 RENAME_NOREPLACE, or link and
//     unlink where that is unsupported): the lock is held from the moment
//     LOCK exists, and LOCK is never seen without its text. If LOCK
//     appeared meanwhile (another opener won the race), or the temporary
//     file was removed by the holder's clean-up, drop the temporary file
//     and start again at 2, which then finds LOCK held: kverr.ErrLocked.
//  4. Re-check the directory under the lock (step 2 again). A refusal at
//     this point removes the LOCK this call published, so nothing is left
//     in a directory that is refused.
//  5. No manifest: write the initialising manifest (KVBUF.tmp.<random>,
//     fsync, rename onto KVBUF, fsync the directory). Initialising (now or
//     since an earlier crash): create bits/ and fsync the directory; Fresh
//     reports true, the caller creates the store and calls MarkReady, which
//     fsyncs the directory and atomically replaces the manifest with the
//     ready one. Ready: store/ and bits/ must exist, else kverr.ErrCorruptDir (a
//     ready manifest is only written once they are durable, so a missing
//     one means lost data, never a new engine).
//  6. Remove leftover temporary files.
//
// Invariants the protocol rests on:
//
//   - In a directory without a manifest, kvbuf creates only LOCK and
//     temporary files, and publishes LOCK only with its text already in
//     it; store/ and bits/ are created only after the manifest is durable.
//     So a manifest-less directory holding anything else is foreign, and an
//     unlocked reader that sees store/ or bits/ but no manifest looks again
//     (the manifest came first and is never removed, only atomically
//     replaced). Such a reader looks for store/ and bits/ before it looks
//     for the manifest once more: only directories seen before a look
//     that finds no manifest prove the manifest lost.
//   - LOCK is removed only by the process holding its flock (a refused or
//     discarded Open that published it). Everyone who locks an existing
//     LOCK checks afterwards that the name still refers to the locked file.
//   - Every temporary name is unique to its writer (O_EXCL); no file is
//     opened with truncation; nothing but the lock holder writes KVBUF.
//   - A failed Open leaves behind only what makes the next Open correct:
//     an initialising manifest and bits/ in a directory that was empty, and
//     nothing at all in an existing engine or a foreign directory.
//
// Directories made by earlier versions keep opening: an empty LOCK next to
// a manifest is an ordinary engine lock (it is not rewritten), and the
// states their initialisation could crash in (KVBUF.tmp alone, an
// initialising manifest without LOCK) are finished like new ones.
//
// # Crash points during initialisation
//
// A crash at any step of initialising an empty directory leaves one of these
// states, each of which the next Open finishes (tested in crash_test.go):
// nothing; LOCK.tmp.* (empty or written); LOCK.tmp.* and LOCK linked to the
// same file (link fallback); LOCK alone; LOCK and a partial or complete
// KVBUF.tmp.*; the initialising manifest (with or without bits/, with a
// partial store/, with a complete ready manifest in KVBUF.tmp.*); the ready
// manifest (done). The manifest and LOCK are fsynced before they are
// published, so a crash never leaves an empty or torn LOCK or KVBUF.
//
// # Engine id and bitslice catalog
//
// Two more meta entries (format 2): EngineIDMeta holds the engine's id, 8
// random bytes stamped as the owner in the header of every bitslice file the
// engine creates; BitsCatalogMeta records every bitslice with the write
// generation and length of its last flush (see BitsCatalog). The engine
// checks each file against them at Open (CheckBitsFile), and so does kvtool
// inspect: a recorded file that is missing, an older copy, a shorter file,
// another engine's file or a format-1 file the engine never had is
// kverr.ErrCorruptDir.
//
// # The keyspace catalog
//
// The engine keeps its keyspaces in one pebble meta entry, CatalogMeta,
// rewritten whole on each change. Its grammar (LF is "\n", SP one space):
//
//	catalog   = *( line LF ) [ line ]   ; the final LF is optional
//	line      = "" / keyspace / next / dropped
//	keyspace  = name SP id              ; a live keyspace and its key prefix
//	dropped   = "@dropped" SP id        ; a dropped keyspace's id whose keys
//	                                    ; may still be in the store
//	next      = "@next" SP id           ; the id the next new keyspace gets
//	name      = 1*128 ( ALPHA / DIGIT / "." / "_" / "-" ), not "." or ".."
//	id        = decimal, 1 to 4294967294 (MaxKeyspaceID); "@next" may also
//	            be 4294967295 (no id left)
//
// Names and ids are unique across live and dropped lines; "@next" appears
// at most once and must exceed every id. Without it the next id is one more
// than the largest id listed (1 for an empty catalog), which is what
// catalogs written before drops existed (lines "name id" only, ids from 1)
// mean. Ids are never reused: when a dropped id is purged and it was the
// largest, "@next" keeps its successor, so a stale key of a dropped
// keyspace can never surface under a new one.
//
// Encode is canonical: keyspace lines sorted by name, then "@dropped" lines
// by id, then "@next" only when it differs from the default. A catalog that
// never had a drop encodes exactly as before, so older engines still read
// it; one with "@" lines is refused by them as corrupt (a name cannot start
// with "@"), never misread.
package enginedir
