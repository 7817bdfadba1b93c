package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/storage"
)

func flushHelp(w io.Writer) {
	fmt.Fprintln(w, "Usage: kvtool flush [--json] DIR")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Opens the kvbuf engine in DIR, flushes its pending state and pebble's")
	fmt.Fprintln(w, "memtables to sstables (synced), closes it, and prints the sstables and")
	fmt.Fprintln(w, "memtables before and after and the persisted watermark. After it, opening")
	fmt.Fprintln(w, "the engine does not replay pebble's write-ahead log.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "DIR must be an existing engine directory that no running engine holds")
	fmt.Fprintln(w, "(a running engine flushes itself: DB.FlushMemtables). Pending changes live")
	fmt.Fprintln(w, "in the memory of the process that wrote them, so a freshly opened engine has")
	fmt.Fprintln(w, "none; what this command moves is what pebble recovered from its log.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	fmt.Fprintln(w, "  --json   print JSON instead of text")
}

// flushJSON is flush's --json output.
type flushJSON struct {
	Path            string     `json:"path"`
	PhysicalFlushes int64      `json:"physical_flushes"`
	Watermark       uint64     `json:"watermark"`
	Before          *storeJSON `json:"before"`
	After           *storeJSON `json:"after"`
}

// storeMetrics opens the store of engine dir read-only and describes it.
func storeMetrics(dir string) (*storeJSON, error) {
	st, err := storage.Open(filepath.Join(dir, kvbuf.StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	m, err := st.Metrics()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	s := &storeJSON{EstimatedKeys: m.EstimatedKeys, Levels: []levelJSON{}, MemTables: m.MemTables, MemTableSize: m.MemTableSize, DiskUsage: m.DiskUsage}
	for i, l := range m.Levels {
		if l.Files > 0 {
			s.Levels = append(s.Levels, levelJSON{Level: i, Files: l.Files, Bytes: l.Bytes})
		}
	}
	return s, nil
}

func (s *storeJSON) sstables() (files, bytes int64) {
	for _, l := range s.Levels {
		files += l.Files
		bytes += l.Bytes
	}
	return files, bytes
}

// lockedError explains ErrLocked for a command that needs the engine.
func lockedError(dir string) error {
	return fmt.Errorf("%s is open by a running engine (flush it from that process): %w", dir, kvbuf.ErrLocked)
}

// runFlush implements "kvtool flush [--json] DIR".
func runFlush(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flush", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	dirs, code, done := parseFlags(fs, args, flushHelp, stdout, stderr)
	if done {
		return code
	}
	if len(dirs) != 1 {
		return usageError(stderr, "flush", fmt.Sprintf("want exactly one DIR, got %d", len(dirs)))
	}
	dir := dirs[0]
	out, err := flushEngine(ctx, dir)
	if err != nil {
		return fail(stderr, "flush", err)
	}
	if *asJSON {
		return writeJSON(stdout, stderr, "flush", out)
	}
	bf, bb := out.Before.sstables()
	af, ab := out.After.sstables()
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "flushed:\t%s\n", out.Path)
	fmt.Fprintf(tw, "physical flushes:\t%d\n", out.PhysicalFlushes)
	fmt.Fprintf(tw, "sstables:\t%s, %d bytes -> %s, %d bytes\n", plural(bf, "file"), bb, plural(af, "file"), ab)
	fmt.Fprintf(tw, "memtables:\t%d (%d bytes) -> %d (%d bytes)\n", out.Before.MemTables, out.Before.MemTableSize, out.After.MemTables, out.After.MemTableSize)
	fmt.Fprintf(tw, "store keys:\t~%d -> ~%d\n", out.Before.EstimatedKeys, out.After.EstimatedKeys)
	fmt.Fprintf(tw, "watermark:\t%d\n", out.Watermark)
	if err := tw.Flush(); err != nil {
		return fail(stderr, "flush", err)
	}
	return exitOK
}

func flushEngine(ctx context.Context, dir string) (flushJSON, error) {
	out := flushJSON{Path: dir}
	if _, err := readManifest(dir); err != nil {
		return out, err
	}
	release, locked, err := lockShared(dir)
	if err != nil {
		return out, err
	}
	if locked {
		return out, lockedError(dir)
	}
	out.Before, err = storeMetrics(dir)
	release()
	if err != nil {
		return out, err
	}
	db, err := kvbuf.Open(dir, nil)
	if errors.Is(err, kvbuf.ErrLocked) {
		return out, lockedError(dir)
	}
	if err != nil {
		return out, err
	}
	// Open every bitslice: the engine opens them lazily, and a damaged one
	// must be reported rather than skipped.
	names, err := kvbuf.BitsNames(dir)
	for _, name := range names {
		if err != nil {
			break
		}
		_, err = db.Bits(name)
	}
	if err == nil {
		err = db.FlushMemtables(ctx)
	}
	st := db.Stats()
	out.PhysicalFlushes = st.PhysicalFlushes
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return out, err
	}
	out.Watermark = db.Watermark()
	if out.After, err = storeMetrics(dir); err != nil {
		return out, err
	}
	return out, nil
}
