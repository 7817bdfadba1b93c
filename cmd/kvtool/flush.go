package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvbuf/kvbuf"
)

func flushHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: kvtool flush [--json] DIR

Opens the kvbuf engine in DIR, flushes its pending state and pebble's
memtables to sstables (synced), closes it, and prints the sstables and
memtables before and after, the engine's flush metrics (generations
frozen, generation writes including retries, failures), its keyspaces and
bitslices, and the persisted watermark before and after. After it, opening
the engine does not replay pebble's write-ahead log.

DIR must be an existing engine directory that no running engine holds
(a running engine flushes itself: DB.FlushMemtables). Pending changes live
in the memory of the process that wrote them, so a freshly opened engine has
none; what this command moves is what pebble recovered from its log. A
keyspace drop that was not yet durable is finished by one generation.

Flags:
  --json   print JSON instead of text
`)
}

// flushJSON is flush's --json output. Generations, GenerationWrites and
// Failures are the engine's flush metrics (kvbuf.Metrics) for the flush
// this command ran; the watermarks are the persisted ones before and after.
type flushJSON struct {
	Path             string     `json:"path"`
	Generations      int64      `json:"generations"`
	GenerationWrites int64      `json:"generation_writes"`
	Failures         int64      `json:"failures"`
	Keyspaces        []string   `json:"keyspaces"`
	Bitslices        []string   `json:"bitslices"`
	WatermarkBefore  uint64     `json:"watermark_before"`
	Watermark        uint64     `json:"watermark"`
	Before           *storeJSON `json:"before"`
	After            *storeJSON `json:"after"`
}

// storeMetrics opens the store of engine dir read-only and describes it,
// with its persisted watermark.
func storeMetrics(dir string) (*storeJSON, uint64, error) {
	si, err := readStore(dir)
	if err != nil {
		return nil, 0, err
	}
	return newStoreJSON(si.metrics), si.metrics.Watermark, nil
}

func (s *storeJSON) sstables() (files, bytes int64) {
	for _, l := range s.Levels {
		files += l.Files
		bytes += l.Bytes
	}
	return files, bytes
}

// openEngine opens the engine in dir for a command. If a running engine
// holds it, the error says so and, in instead, what to do (lockedError).
func openEngine(dir string, o *kvbuf.Options, instead string) (*kvbuf.DB, error) {
	db, err := kvbuf.Open(dir, o)
	if errors.Is(err, kvbuf.ErrLocked) {
		return nil, lockedError(dir, instead)
	}
	return db, err
}

// lockedError explains ErrLocked for a command that needs the engine:
// what holds the directory, and what to do instead.
func lockedError(dir, instead string) error {
	return fmt.Errorf("%s is open by a running engine (another process, or this one, holds its lock; %s): %w", dir, instead, kvbuf.ErrLocked)
}

// runFlush implements "kvtool flush [--json] DIR".
func runFlush(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flush", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	dirs, code, done := parseFlagsN(fs, args, 1, "want exactly one DIR, got %d", flushHelp, stdout, stderr)
	if done {
		return code
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
	fmt.Fprintf(tw, "generations:\t%d (%s, %s)\n", out.Generations, plural(out.GenerationWrites, "write"), plural(out.Failures, "failure"))
	fmt.Fprintf(tw, "keyspaces:\t%s\n", nameList(out.Keyspaces))
	fmt.Fprintf(tw, "bitslices:\t%s\n", nameList(out.Bitslices))
	fmt.Fprintf(tw, "sstables:\t%s, %d bytes -> %s, %d bytes\n", plural(bf, "file"), bb, plural(af, "file"), ab)
	fmt.Fprintf(tw, "memtables:\t%d (%d bytes) -> %d (%d bytes)\n", out.Before.MemTables, out.Before.MemTableSize, out.After.MemTables, out.After.MemTableSize)
	fmt.Fprintf(tw, "store keys:\t~%d -> ~%d\n", out.Before.EstimatedKeys, out.After.EstimatedKeys)
	fmt.Fprintf(tw, "watermark:\t%d -> %d\n", out.WatermarkBefore, out.Watermark)
	if err := tw.Flush(); err != nil {
		return fail(stderr, "flush", err)
	}
	return exitOK
}

// nameList formats names as "n (a, b, c)", or "0".
func nameList(names []string) string {
	if len(names) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", len(names), strings.Join(names, ", "))
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
		return out, lockedError(dir, "a running engine flushes itself: DB.FlushMemtables")
	}
	out.Before, out.WatermarkBefore, err = storeMetrics(dir)
	release()
	if err != nil {
		return out, err
	}
	// Open opens every bitslice of the directory, so a damaged one is
	// reported here rather than skipped.
	db, err := openEngine(dir, nil, "a running engine flushes itself: DB.FlushMemtables")
	if err != nil {
		return out, err
	}
	out.Keyspaces, out.Bitslices = db.Keyspaces(), db.Bitslices()
	err = db.FlushMemtables(ctx)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	// Close's final flush is counted too: read the metrics after it.
	m := db.Metrics()
	out.Generations, out.GenerationWrites, out.Failures = m.Generations, m.GenerationWrites, m.Failures
	if err != nil {
		return out, err
	}
	out.Watermark = db.Watermark()
	if out.After, _, err = storeMetrics(dir); err != nil {
		return out, err
	}
	return out, nil
}
