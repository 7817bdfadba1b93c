package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// inspectJSON is the --json output for a bitslice file (and each bitslice
// of an engine); field names are stable.
type inspectJSON struct {
	Path          string `json:"path"`
	Kind          string `json:"kind"`
	Name          string `json:"name,omitempty"`
	FormatVersion int    `json:"format_version"`
	Bits          uint64 `json:"bits"`
	SetBits       uint64 `json:"set_bits"`
	Watermark     uint64 `json:"watermark"`
	Owner         string `json:"owner"`      // engine id stamped in the file, hex; "" for none (format 1, standalone files)
	Generation    uint64 `json:"generation"` // write generation of its last update
	// Catalog is the engine's record of the bitslice (engine directories
	// only; null when the store could not be read or the bitslice is not
	// recorded yet).
	Catalog    *catalogJSON `json:"catalog,omitempty"`
	HeaderSeq  uint64       `json:"header_seq"`
	HeaderSlot int          `json:"header_slot"`
	ValidSlots int          `json:"valid_slots"`
	FileSize   int64        `json:"file_size"`
}

// catalogJSON is an engine's bitslice catalog entry: the write generation
// and length of the bitslice's last write the store made durable.
type catalogJSON struct {
	Generation uint64 `json:"generation"`
	Bits       uint64 `json:"bits"`
	Format1    bool   `json:"format1,omitempty"`
}

// engineJSON is the --json output for an engine directory. EngineID,
// Store, Watermark, Keyspaces and DroppedKeyspaces are null when a running
// engine holds the directory (EngineID also for an engine of format 1).
type engineJSON struct {
	Path          string         `json:"path"`
	Kind          string         `json:"kind"`
	FormatVersion int            `json:"format_version"`
	Locked        bool           `json:"locked"`
	EngineID      *string        `json:"engine_id"`
	Watermark     *uint64        `json:"watermark"`
	Store         *storeJSON     `json:"store"`
	Keyspaces     []keyspaceJSON `json:"keyspaces"`
	// DroppedKeyspaces are the ids of dropped keyspaces whose keys may
	// still be in the store, awaiting deletion.
	DroppedKeyspaces []uint32      `json:"dropped_keyspaces"`
	Bitslices        []inspectJSON `json:"bitslices"`
	TotalSize        int64         `json:"total_size"`
	Digest           string        `json:"digest,omitempty"` // with --digest
}

// keyspaceJSON is a keyspace of the catalog: its name and the id that
// prefixes its keys in the store.
type keyspaceJSON struct {
	Name string `json:"name"`
	ID   uint32 `json:"id"`
}

type storeJSON struct {
	EstimatedKeys uint64      `json:"estimated_keys"`
	Levels        []levelJSON `json:"levels"`
	MemTables     int64       `json:"memtables"`
	MemTableSize  uint64      `json:"memtable_size"`
	DiskUsage     uint64      `json:"disk_usage"`
}

type levelJSON struct {
	Level int   `json:"level"`
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

func inspectHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: kvtool inspect [--json] [--digest] PATH

PATH is a bitslice file or a kvbuf engine directory (of a kvraft node: the
engine directory inside its data directory, the one its /status names).

For a bitslice file: validates it and prints its format version, length in
bits, set bits, persisted watermark, owner (the engine it belongs to), write
generation, header sequence and file size.

For an engine directory: prints the engine format version and id, the
persisted watermark, the store's estimated key count, LSM levels, memtables
and disk usage, the keyspaces (and dropped ones awaiting deletion), every
bitslice as above with the engine's record of it, and the total size. It
checks every bitslice file against that record as opening the engine does:
a recorded bitslice whose file is missing, an older copy, a shorter file or
another engine's file is an error naming each one (the engine will not open
until the file is restored). It opens the store read-only and never writes.
If a running engine holds the directory, the store cannot be read: inspect
says so, still describes the bitslice files (which may be mid-update, and
are not checked) and exits 0.

A corrupt or foreign file or directory, or a missing PATH, is reported on
stderr in one line saying what was found, exit status 1.

Flags:
  --json   print JSON instead of text
  --digest also print the engine's content digest (engine not running)
`)
}

// runInspect implements "kvtool inspect [--json] [--digest] PATH". It only reads: a
// bitslice file through its descriptor (no lock, no mapping), an engine's
// store through a read-only pebble open.
func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	withDigest := fs.Bool("digest", false, "also print the engine's content digest")
	paths, code, done := parseFlagsN(fs, args, 1, "want exactly one PATH, got %d", inspectHelp, stdout, stderr)
	if done {
		return code
	}
	path := paths[0]
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fail(stderr, "inspect", statError(path, err))
	case st.IsDir():
		if hint := kvraftDataDirHint(path); hint != "" {
			return fail(stderr, "inspect", errors.New(hint))
		}
		return inspectEngine(path, *asJSON, *withDigest, stdout, stderr)
	case !st.Mode().IsRegular():
		return fail(stderr, "inspect", fmt.Errorf("%s is a %s, not a bitslice file or an engine directory", path, fileKind(st.Mode())))
	}
	info, err := bitslice.ReadInfo(path)
	if err != nil {
		return fail(stderr, "inspect", notBitsliceError(path, err))
	}
	if *asJSON {
		return writeJSON(stdout, stderr, "inspect", bitsliceJSON(info, ""))
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "path:\t%s\n", info.Path)
	fmt.Fprintf(tw, "kind:\tbitslice\n")
	fmt.Fprintf(tw, "format version:\t%d\n", info.Version)
	fmt.Fprintf(tw, "bits:\t%d\n", info.Len)
	fmt.Fprintf(tw, "set bits:\t%d\n", info.Ones)
	fmt.Fprintf(tw, "watermark:\t%d\n", info.Watermark)
	fmt.Fprintf(tw, "owner:\t%s\n", ownerText(info))
	fmt.Fprintf(tw, "generation:\t%d\n", info.Gen)
	fmt.Fprintf(tw, "header seq:\t%d (slot %d; %d of 2 slots valid)\n", info.Seq, info.Slot, info.ValidSlots)
	fmt.Fprintf(tw, "file size:\t%d bytes\n", info.FileSize)
	if err := tw.Flush(); err != nil {
		return fail(stderr, "inspect", err)
	}
	return exitOK
}

// kvraftDataDirHint returns, for the data directory of a kvraft node (an
// IDENTITY file that says so), which engine directory inside it to inspect;
// "" for any other directory.
func kvraftDataDirHint(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "IDENTITY"))
	if err != nil || !strings.HasPrefix(string(b), "kvraft data directory\n") {
		return ""
	}
	var engines []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); e.IsDir() && (n == "engine" || strings.HasPrefix(n, "engine-") && !strings.HasSuffix(n, ".staging")) {
			engines = append(engines, filepath.Join(dir, n))
		}
	}
	hint := "the engine directory inside it"
	switch len(engines) {
	case 0:
	case 1:
		hint = engines[0]
	default:
		hint = "the one of " + strings.Join(engines, ", ") + " that the node's /status names (\"engine\")"
	}
	return fmt.Sprintf("%s is a kvraft node's data directory, not an engine directory: inspect %s", dir, hint)
}

func bitsliceJSON(info bitslice.Info, name string) inspectJSON {
	return inspectJSON{
		Path:          info.Path,
		Kind:          "bitslice",
		Name:          name,
		FormatVersion: info.Version,
		Bits:          info.Len,
		SetBits:       info.Ones,
		Watermark:     info.Watermark,
		Owner:         ownerHex(info.Owner),
		Generation:    info.Gen,
		HeaderSeq:     info.Seq,
		HeaderSlot:    info.Slot,
		ValidSlots:    info.ValidSlots,
		FileSize:      info.FileSize,
	}
}

func writeJSON(stdout, stderr io.Writer, cmd string, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(stderr, cmd, err)
	}
	return exitOK
}

// readManifest checks that dir is a complete kvbuf engine directory and
// returns its format version (flush uses it; the engine directory package
// owns the manifest and its format).
func readManifest(dir string) (int, error) {
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("%w (want an engine directory)", statError(dir, err))
	}
	info, err := enginedir.Describe(dir)
	if err != nil {
		return 0, err
	}
	if err := checkReady(info); err != nil {
		return 0, err
	}
	return info.FormatVersion, nil
}

// checkReady turns an engine whose initialisation did not finish into an
// error that says what happened.
func checkReady(info enginedir.Info) error {
	if info.State == enginedir.Ready {
		return nil
	}
	if info.Locked {
		return fmt.Errorf("%s: engine initialisation is in progress in a running engine: %w", info.Path, kvbuf.ErrLocked)
	}
	stage := "before its manifest was written"
	if info.FormatVersion != 0 {
		stage = fmt.Sprintf("format %d", info.FormatVersion)
	}
	// The engine finishes an interrupted initialisation when it opens the
	// directory.
	return fmt.Errorf("%s: engine initialisation was interrupted (%s); opening it with the engine finishes it: %w", info.Path, stage, kvbuf.ErrNotEngine)
}

// lockShared takes a shared lock on the engine directory so that no engine
// opens it while it is read. It returns locked = true, and no lock, if an
// engine holds it; release undoes a successful lock. A missing LOCK file
// (an engine that never opened) needs no lock and is not created.
func lockShared(dir string) (release func(), locked bool, err error) {
	return enginedir.ReadLock(dir)
}

// dirSize sums the sizes of the regular files under dir. A file or
// directory removed while the walk runs is skipped: an engine that holds
// dir (inspect of a locked engine) deletes its store's obsolete files
// (OPTIONS, logs, tables) at any time, so the sum is of a moving
// directory.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// storeInfo is what inspect and flush read from an engine's store.
type storeInfo struct {
	metrics storage.Metrics
	catalog enginedir.Catalog
	// engineID is 0 and bits nil for an engine of format 1 (none yet).
	engineID uint64
	bits     enginedir.BitsCatalog
}

// readStore opens the store of the engine in dir read-only and returns its
// metrics, keyspace catalog (an engine that never made a keyspace has none
// stored: an empty one), engine id and bitslice catalog.
func readStore(dir string) (storeInfo, error) {
	var si storeInfo
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return si, err
	}
	meta := func(name string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		b, err = st.GetMeta(name)
		if errors.Is(err, kvbuf.ErrNotFound) {
			b, err = nil, nil
		}
		return b
	}
	si.metrics, err = st.Metrics()
	cat, id, bits := meta(enginedir.CatalogMeta), meta(enginedir.EngineIDMeta), meta(enginedir.BitsCatalogMeta)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return si, err
	}
	if si.catalog, err = enginedir.ParseCatalog(cat); err != nil {
		return si, fmt.Errorf("%s: %w", dir, err)
	}
	if id != nil {
		if si.engineID, err = enginedir.ParseEngineID(id); err != nil {
			return si, fmt.Errorf("%s: %w", dir, err)
		}
		if si.bits, err = enginedir.ParseBitsCatalog(bits); err != nil {
			return si, fmt.Errorf("%s: %w", dir, err)
		}
	}
	return si, nil
}

// newStoreJSON describes a store's metrics (inspect and flush share it).
func newStoreJSON(m storage.Metrics) *storeJSON {
	s := &storeJSON{
		EstimatedKeys: m.EstimatedKeys,
		Levels:        []levelJSON{},
		MemTables:     m.MemTables,
		MemTableSize:  m.MemTableSize,
		DiskUsage:     m.DiskUsage,
	}
	for i, l := range m.Levels {
		if l.Files > 0 {
			s.Levels = append(s.Levels, levelJSON{Level: i, Files: l.Files, Bytes: l.Bytes})
		}
	}
	return s
}

// describeEngine gathers what inspect prints about the engine in dir, and
// the problems that would make the engine refuse to open (each one line).
func describeEngine(dir string) (e engineJSON, problems []string, err error) {
	e = engineJSON{Path: dir, Kind: "engine", Bitslices: []inspectJSON{}}
	info, err := enginedir.Describe(dir)
	if err != nil {
		return e, nil, err
	}
	if err := checkReady(info); err != nil {
		return e, nil, err
	}
	e.FormatVersion = info.FormatVersion
	release, locked, err := lockShared(dir)
	if err != nil {
		return e, nil, err
	}
	e.Locked = locked
	var si storeInfo
	if !locked {
		defer release()
		if si, err = readStore(dir); err != nil {
			return e, nil, err
		}
		m, c := si.metrics, si.catalog
		e.Watermark = &m.Watermark
		e.Store = newStoreJSON(m)
		e.Keyspaces = []keyspaceJSON{}
		for _, name := range c.Names() {
			e.Keyspaces = append(e.Keyspaces, keyspaceJSON{Name: name, ID: c.Keyspaces[name]})
		}
		e.DroppedKeyspaces = append([]uint32{}, c.Dropped...)
		if si.engineID != 0 {
			id := ownerHex(si.engineID)
			e.EngineID = &id
		}
	}
	names, err := enginedir.BitsNames(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return e, nil, err
	}
	onDisk := map[string]bool{}
	for _, name := range names {
		onDisk[name] = true
		info, err := bitslice.ReadInfo(filepath.Join(dir, enginedir.BitsDir, name+enginedir.BitsExt))
		if err != nil {
			return e, nil, fmt.Errorf("bitslice %q: %w", name, err)
		}
		j := bitsliceJSON(info, name)
		if si.engineID != 0 {
			ent, ok := si.bits[name]
			if ok {
				j.Catalog = &catalogJSON{Generation: ent.Gen, Bits: ent.Len, Format1: ent.V1}
			}
			h := enginedir.BitsHeader{Version: info.Version, Owner: info.Owner, Gen: info.Gen, Len: info.Len}
			if err := enginedir.CheckBitsFile(name, h, ent, ok, si.engineID); err != nil {
				problems = append(problems, strings.TrimSuffix(kverr.Trim(err.Error()), ": "+kverr.Trim(kvbuf.ErrCorruptDir.Error())))
			}
		}
		e.Bitslices = append(e.Bitslices, j)
	}
	for _, name := range slices.Sorted(maps.Keys(si.bits)) {
		if !onDisk[name] {
			ent := si.bits[name]
			problems = append(problems, fmt.Sprintf("bitslice %q: recorded by the engine (generation %d, %d bits) but %s is missing",
				name, ent.Gen, ent.Len, filepath.Join(dir, enginedir.BitsDir, name+enginedir.BitsExt)))
		}
	}
	if e.TotalSize, err = dirSize(dir); err != nil {
		return e, nil, err
	}
	return e, problems, nil
}

func inspectEngine(dir string, asJSON, withDigest bool, stdout, stderr io.Writer) int {
	e, problems, err := describeEngine(dir)
	if err == nil && withDigest {
		err = addDigest(&e)
	}
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	if len(problems) > 0 {
		return fail(stderr, "inspect", fmt.Errorf("%s: the engine will not open (corrupt engine directory: restore the files from a backup or a checkpoint): %s",
			dir, strings.Join(problems, "; ")))
	}
	if asJSON {
		return writeJSON(stdout, stderr, "inspect", e)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "path:\t%s\n", e.Path)
	fmt.Fprintf(tw, "kind:\tengine\n")
	fmt.Fprintf(tw, "format version:\t%d\n", e.FormatVersion)
	switch {
	case e.Locked:
	case e.EngineID != nil:
		fmt.Fprintf(tw, "engine id:\t%s\n", *e.EngineID)
	default:
		fmt.Fprintf(tw, "engine id:\tnone (format 1: the next open gives it one and records its bitslices)\n")
	}
	if e.Locked {
		fmt.Fprintf(tw, "locked:\tyes: open by a running engine; store details unavailable, bitslices may be mid-update\n")
	} else {
		fmt.Fprintf(tw, "locked:\tno\n")
		fmt.Fprintf(tw, "watermark:\t%d\n", *e.Watermark)
		fmt.Fprintf(tw, "store keys:\t~%d (estimate: sstable entries, all namespaces)\n", e.Store.EstimatedKeys)
		fmt.Fprintf(tw, "memtables:\t%d (%d bytes)\n", e.Store.MemTables, e.Store.MemTableSize)
		if len(e.Store.Levels) == 0 {
			fmt.Fprintf(tw, "levels:\tno sstables\n")
		}
		for _, l := range e.Store.Levels {
			fmt.Fprintf(tw, "L%d:\t%s, %d bytes\n", l.Level, plural(l.Files, "file"), l.Bytes)
		}
		fmt.Fprintf(tw, "store disk usage:\t%d bytes\n", e.Store.DiskUsage)
		fmt.Fprintf(tw, "keyspaces:\t%d\n", len(e.Keyspaces))
		for _, k := range e.Keyspaces {
			fmt.Fprintf(tw, "  %s:\tid %d\n", k.Name, k.ID)
		}
		if n := len(e.DroppedKeyspaces); n > 0 {
			ids := make([]string, n)
			for i, id := range e.DroppedKeyspaces {
				ids[i] = strconv.FormatUint(uint64(id), 10)
			}
			fmt.Fprintf(tw, "dropped keyspaces:\t%d awaiting deletion (ids %s)\n", n, strings.Join(ids, ", "))
		}
	}
	fmt.Fprintf(tw, "bitslices:\t%d\n", len(e.Bitslices))
	for _, b := range e.Bitslices {
		fmt.Fprintf(tw, "  %s:\t%d bits, %d set, watermark %d, generation %d%s, format version %d, %d bytes\n",
			b.Name, b.Bits, b.SetBits, b.Watermark, b.Generation, catalogText(e, b), b.FormatVersion, b.FileSize)
	}
	fmt.Fprintf(tw, "total size:\t%d bytes\n", e.TotalSize)
	if e.Digest != "" {
		fmt.Fprintf(tw, "digest:\t%s\n", e.Digest)
	}
	if err := tw.Flush(); err != nil {
		return fail(stderr, "inspect", err)
	}
	return exitOK
}

// plural formats n with noun, adding an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// statError says that path cannot be inspected, without calling it a
// bitslice or an engine (it is neither yet).
func statError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", path, pe.Err)
	}
	return err
}

// fileKind names a file mode that is not a regular file or a directory.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// bitsMagic starts every bitslice header slot.
var bitsMagic = []byte("KVBUFBIT")

// notBitsliceError explains why the regular file at path is not a valid
// bitslice file, naming what it is: a damaged bitslice file, the manifest
// or lock file of an engine directory, or something else.
func notBitsliceError(path string, err error) error {
	head := make([]byte, 64)
	n := 0
	if f, oerr := os.Open(path); oerr == nil {
		n, _ = io.ReadFull(f, head)
		f.Close()
	}
	head = head[:n]
	dir := filepath.Dir(path)
	base := filepath.Base(path)
	switch {
	case !errors.Is(err, kvbuf.ErrCorruptBits):
		return err
	case bytes.HasPrefix(head, bitsMagic):
		// Its own reason, without the package's path prefix.
		msg := strings.TrimPrefix(err.Error(), kverr.Prefix+path+": ")
		return fmt.Errorf("%s: damaged bitslice file: %s", path, strings.TrimSuffix(msg, ": "+kverr.Trim(kvbuf.ErrCorruptBits.Error())))
	case base == enginedir.ManifestName && bytes.HasPrefix(head, []byte("kvbuf engine directory\n")):
		return fmt.Errorf("%s is the manifest of the kvbuf engine directory %s, not a bitslice file (inspect the directory: kvtool inspect %s)", path, dir, dir)
	case base == enginedir.LockName:
		return fmt.Errorf("%s is the lock file of an engine directory, not a bitslice file (inspect the directory: kvtool inspect %s)", path, dir)
	}
	return fmt.Errorf("%s is not a bitslice file (%d bytes, starting %.8q) nor an engine directory", path, fileSize(path), head)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

// ownerHex formats an engine id ("" for none).
func ownerHex(id uint64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("%016x", id)
}

// ownerText is a bitslice's owner for the text output.
func ownerText(info bitslice.Info) string {
	switch {
	case info.Version == 1:
		return "none (format 1: files of that format carry no owner)"
	case info.Owner == 0:
		return "none (a standalone file)"
	}
	return ownerHex(info.Owner)
}

// catalogText says how the engine's record of bitslice b stands.
func catalogText(e engineJSON, b inspectJSON) string {
	switch {
	case e.Locked || e.EngineID == nil:
		return ""
	case b.Catalog == nil:
		return " (not recorded yet: the engine's next flush records it)"
	}
	return fmt.Sprintf(" (recorded: %d)", b.Catalog.Generation)
}
