package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
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
	HeaderSeq     uint64 `json:"header_seq"`
	HeaderSlot    int    `json:"header_slot"`
	ValidSlots    int    `json:"valid_slots"`
	FileSize      int64  `json:"file_size"`
}

// engineJSON is the --json output for an engine directory. Store,
// Watermark, Keyspaces and DroppedKeyspaces are null when a running engine
// holds the directory.
type engineJSON struct {
	Path          string         `json:"path"`
	Kind          string         `json:"kind"`
	FormatVersion int            `json:"format_version"`
	Locked        bool           `json:"locked"`
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
	fmt.Fprintln(w, "Usage: kvtool inspect [--json] PATH")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PATH is a bitslice file or a kvbuf engine directory.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "For a bitslice file: validates it and prints its format version, length in")
	fmt.Fprintln(w, "bits, set bits, persisted watermark, header sequence and file size.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "For an engine directory: prints the engine format version, the persisted")
	fmt.Fprintln(w, "watermark, the store's estimated key count, LSM levels, memtables and disk")
	fmt.Fprintln(w, "usage, the keyspaces (and dropped ones awaiting deletion), every bitslice")
	fmt.Fprintln(w, "as above, and the total size. It opens the store read-only and never")
	fmt.Fprintln(w, "writes. If a running engine holds the directory, the store cannot be read:")
	fmt.Fprintln(w, "inspect says so, still describes the bitslice files (which may be")
	fmt.Fprintln(w, "mid-update) and exits 0.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A corrupt or foreign file or directory is reported on stderr with the")
	fmt.Fprintln(w, "reason, exit status 1.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	fmt.Fprintln(w, "  --json   print JSON instead of text")
	fmt.Fprintln(w, "  --digest also print the engine's content digest (engine not running)")
}

// runInspect implements "kvtool inspect [--json] PATH". It only reads: a
// bitslice file through its descriptor (no lock, no mapping), an engine's
// store through a read-only pebble open.
func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	withDigest := fs.Bool("digest", false, "also print the engine's content digest")
	paths, code, done := parseFlags(fs, args, inspectHelp, stdout, stderr)
	if done {
		return code
	}
	if len(paths) != 1 {
		return usageError(stderr, "inspect", fmt.Sprintf("want exactly one PATH, got %d", len(paths)))
	}
	path := paths[0]
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return inspectEngine(path, *asJSON, *withDigest, stdout, stderr)
	}
	info, err := bitslice.ReadInfo(path)
	if err != nil {
		return fail(stderr, "inspect", err)
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
	fmt.Fprintf(tw, "header seq:\t%d (slot %d; %d of 2 slots valid)\n", info.Seq, info.Slot, info.ValidSlots)
	fmt.Fprintf(tw, "file size:\t%d bytes\n", info.FileSize)
	if err := tw.Flush(); err != nil {
		return fail(stderr, "inspect", err)
	}
	return exitOK
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
		return 0, err
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
		return fmt.Errorf("%s: engine initialisation is in progress in a running engine: %w", info.Path, enginedir.ErrLocked)
	}
	stage := "before its manifest was written"
	if info.FormatVersion != 0 {
		stage = fmt.Sprintf("format %d", info.FormatVersion)
	}
	// The engine finishes an interrupted initialisation when it opens the
	// directory.
	return fmt.Errorf("%s: engine initialisation was interrupted (%s); opening it with the engine finishes it: %w", info.Path, stage, enginedir.ErrNotEngine)
}

// lockShared takes a shared lock on the engine directory so that no engine
// opens it while it is read. It returns locked = true, and no lock, if an
// engine holds it; release undoes a successful lock. A missing LOCK file
// (an engine that never opened) needs no lock and is not created.
func lockShared(dir string) (release func(), locked bool, err error) {
	return enginedir.ReadLock(dir)
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// readStore opens the store of the engine in dir read-only and returns its
// metrics and keyspace catalog (an engine that never made a keyspace has
// none stored: an empty one).
func readStore(dir string) (storage.Metrics, enginedir.Catalog, error) {
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return storage.Metrics{}, enginedir.Catalog{}, err
	}
	m, err := st.Metrics()
	var b []byte
	if err == nil {
		b, err = st.GetMeta(enginedir.CatalogMeta)
		if errors.Is(err, storage.ErrNotFound) {
			b, err = nil, nil
		}
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return storage.Metrics{}, enginedir.Catalog{}, err
	}
	c, err := enginedir.ParseCatalog(b)
	if err != nil {
		return storage.Metrics{}, enginedir.Catalog{}, fmt.Errorf("%s: %w", dir, err)
	}
	return m, c, nil
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

// describeEngine gathers what inspect prints about the engine in dir.
func describeEngine(dir string) (engineJSON, error) {
	e := engineJSON{Path: dir, Kind: "engine", Bitslices: []inspectJSON{}}
	info, err := enginedir.Describe(dir)
	if err != nil {
		return e, err
	}
	if err := checkReady(info); err != nil {
		return e, err
	}
	e.FormatVersion = info.FormatVersion
	release, locked, err := lockShared(dir)
	if err != nil {
		return e, err
	}
	e.Locked = locked
	if !locked {
		defer release()
		m, c, err := readStore(dir)
		if err != nil {
			return e, err
		}
		e.Watermark = &m.Watermark
		e.Store = newStoreJSON(m)
		e.Keyspaces = []keyspaceJSON{}
		for _, name := range c.Names() {
			e.Keyspaces = append(e.Keyspaces, keyspaceJSON{Name: name, ID: c.Keyspaces[name]})
		}
		e.DroppedKeyspaces = append([]uint32{}, c.Dropped...)
	}
	names, err := enginedir.BitsNames(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return e, err
	}
	for _, name := range names {
		info, err := bitslice.ReadInfo(filepath.Join(dir, enginedir.BitsDir, name+enginedir.BitsExt))
		if err != nil {
			return e, err
		}
		e.Bitslices = append(e.Bitslices, bitsliceJSON(info, name))
	}
	if e.TotalSize, err = dirSize(dir); err != nil {
		return e, err
	}
	return e, nil
}

func inspectEngine(dir string, asJSON, withDigest bool, stdout, stderr io.Writer) int {
	e, err := describeEngine(dir)
	if err == nil && withDigest {
		err = addDigest(&e)
	}
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	if asJSON {
		return writeJSON(stdout, stderr, "inspect", e)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "path:\t%s\n", e.Path)
	fmt.Fprintf(tw, "kind:\tengine\n")
	fmt.Fprintf(tw, "format version:\t%d\n", e.FormatVersion)
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
		fmt.Fprintf(tw, "  %s:\t%d bits, %d set, watermark %d, format version %d, %d bytes\n",
			b.Name, b.Bits, b.SetBits, b.Watermark, b.FormatVersion, b.FileSize)
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
