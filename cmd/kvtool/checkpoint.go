package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

func checkpointHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: kvtool checkpoint [--json] DIR DEST

Opens the kvbuf engine in DIR and writes a consistent copy of it into DEST
(DB.Checkpoint): the store (pebble's checkpoint, hard links where DEST is on
the same file system) and every bitslice as of the same instant, after a
flush. DEST becomes an engine directory of its own, with its own engine id
and the watermark printed: a host restores it by opening it and replaying
its log from that watermark + 1. DIR is left as it was (it is opened and
closed, which flushes what pebble recovered from its log).

DEST must not exist or be an empty directory. DIR must be an existing engine
directory that no running engine holds (a running engine checkpoints
itself: DB.Checkpoint). An interrupt stops it and removes DEST.

Flags:
  --json   print JSON instead of text
`)
}

// checkpointJSON is checkpoint's --json output.
type checkpointJSON struct {
	Path       string   `json:"path"`
	Checkpoint string   `json:"checkpoint"`
	Watermark  uint64   `json:"watermark"`
	Keyspaces  []string `json:"keyspaces"`
	Bitslices  []string `json:"bitslices"`
	Size       int64    `json:"size"`
}

// runCheckpoint implements "kvtool checkpoint [--json] DIR DEST".
func runCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checkpoint", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	dirs, code, done := parseFlagsN(fs, args, 2, "want DIR and DEST, got %d arguments", checkpointHelp, stdout, stderr)
	if done {
		return code
	}
	out, err := checkpoint(ctx, dirs[0], dirs[1])
	if err != nil {
		return fail(stderr, "checkpoint", err)
	}
	if *asJSON {
		return writeJSON(stdout, stderr, "checkpoint", out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "checkpoint:\t%s\n", out.Checkpoint)
	fmt.Fprintf(tw, "of:\t%s\n", out.Path)
	fmt.Fprintf(tw, "watermark:\t%d (replay the host's log from op %d)\n", out.Watermark, out.Watermark+1)
	fmt.Fprintf(tw, "keyspaces:\t%s\n", nameList(out.Keyspaces))
	fmt.Fprintf(tw, "bitslices:\t%s\n", nameList(out.Bitslices))
	fmt.Fprintf(tw, "size:\t%d bytes (store files hard-linked where possible)\n", out.Size)
	if err := tw.Flush(); err != nil {
		return fail(stderr, "checkpoint", err)
	}
	return exitOK
}

func checkpoint(ctx context.Context, dir, dest string) (out checkpointJSON, err error) {
	out = checkpointJSON{Path: dir, Checkpoint: dest}
	// A missing or foreign DIR must not be created or written into:
	// only an existing engine is opened.
	if _, err := readManifest(dir); err != nil {
		return out, err
	}
	db, err := openEngine(dir, nil, "a running engine checkpoints itself: DB.Checkpoint")
	if err != nil {
		return out, err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	out.Keyspaces, out.Bitslices = db.Keyspaces(), db.Bitslices()
	if out.Watermark, err = db.Checkpoint(ctx, dest); err != nil {
		return out, err
	}
	if out.Size, err = dirSize(dest); err != nil {
		return out, err
	}
	return out, nil
}
