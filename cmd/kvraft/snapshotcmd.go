package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/raftkv"
)

// Backups: GET /snapshot on a running node streams its engine as of one
// applied index (raftkv's Node.Backup, in kvbuf's snapshot stream format);
// `kvraft snapshot` saves one to a file; `kvraft restore` makes the data
// directory of a node of a new cluster from one.

const (
	headerSnapshotIndex  = "X-Kvraft-Snapshot-Index"
	headerSnapshotNode   = "X-Kvraft-Snapshot-Node"
	headerSnapshotDigest = "X-Kvraft-Snapshot-Digest" // a trailer, with ?digest=1
)

// snapshot serves GET /snapshot[?stale=1][?digest=1]: the stream, with the
// index in a header and, with ?digest=1, the content digest of the
// snapshot (what /status?digest=1 reports for a node at that index) in a
// trailer. It is an admin call (credentials as for writes). A stream that
// fails midway is cut off (the client sees an error, not a short file).
func (s *server) snapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.auth.check(r); err != nil {
		writeError(w, http.StatusUnauthorized, fmt.Errorf("node %d: %w", s.n.ID(), err))
		return
	}
	ro, err := readOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	withDigest := false
	switch v := r.URL.Query().Get("digest"); v {
	case "", "0":
	case "1":
		withDigest = true
	default:
		writeError(w, http.StatusBadRequest, badRequest("?digest=%q: want 1 or 0", v))
		return
	}
	started := false
	o := &raftkv.BackupOptions{Stale: ro != nil && ro.Stale, Snapshot: func(snap *kvbuf.Snapshot, index uint64) error {
		var digest string
		if withDigest {
			var err error
			if digest, err = snap.Digest(r.Context()); err != nil {
				return err
			}
			w.Header().Set("Trailer", headerSnapshotDigest)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(headerSnapshotIndex, strconv.FormatUint(index, 10))
		w.Header().Set(headerSnapshotNode, strconv.FormatUint(s.n.ID(), 10))
		w.WriteHeader(http.StatusOK)
		started = true
		if withDigest {
			w.Header().Set(headerSnapshotDigest, digest)
		}
		return nil
	}}
	_, _, err = s.n.Backup(r.Context(), w, o)
	switch {
	case err != nil && !started:
		writeError(w, statusOf(err), err)
	case err != nil:
		panic(http.ErrAbortHandler) // cut off: the client must see the stream fail
	}
}

// runSnapshot implements kvraft snapshot --endpoint HOST:PORT --out FILE: it
// saves a snapshot of the
// node at HOST:PORT to FILE (written to FILE.part, synced, then renamed,
// mode 0600), and prints its index, size and content digest.
func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvraft snapshot", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "the node to save a snapshot of, HOST:PORT (required)")
	out := fs.String("out", "", "the file to write (required; not overwritten)")
	stale := fs.Bool("stale", false, "the node's applied state as it is, without a ReadIndex round")
	cf := addClientFlags(fs)
	if code, ok := parseCommand(fs, args, snapshotHelp, stdout, stderr); !ok {
		return code
	}
	bad := func(format string, a ...any) int { return usageErr(fs, stderr, format, a...) }
	switch {
	case *endpoint == "":
		return bad("--endpoint is required")
	case *out == "":
		return bad("--out is required")
	}
	if !flagSet(fs, "timeout") {
		cf.timeout = 24 * time.Hour // a snapshot takes as long as it takes
	}
	ac, err := cf.client()
	if err != nil {
		return bad("%v", err)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kvraft snapshot: %v\n", err)
		return exitError
	}
	if _, err := os.Stat(*out); err == nil {
		return fail(fmt.Errorf("%s exists: not overwritten", *out))
	}
	q := "?digest=1"
	if *stale {
		q += "&stale=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ac.url(*endpoint, "/snapshot"+q), nil)
	if err != nil {
		return fail(err)
	}
	resp, err := ac.do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fail(fmt.Errorf("%s: HTTP %d: %s", *endpoint, resp.StatusCode, strings.TrimSpace(string(b))))
	}
	part := *out + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	n, err := io.Copy(f, resp.Body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, *out)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(*out))
	}
	if err != nil {
		_ = os.Remove(part)
		return fail(fmt.Errorf("%s: %w", *endpoint, err))
	}
	fmt.Fprintf(stdout, "snapshot of node %s at index %s: %d bytes, digest %s, in %s\n",
		resp.Header.Get(headerSnapshotNode), resp.Header.Get(headerSnapshotIndex), n, resp.Trailer.Get(headerSnapshotDigest), *out)
	return exitOK
}

// runRestore implements kvraft restore --snapshot FILE --id N --peers ...
// --data DIR: it makes DIR
// the data directory of node N of a new cluster of --peers holding FILE's
// content (raftkv.Restore). Run it for every node of the new cluster, with
// the same FILE, --peers and --cluster-token; then start each node with
// its usual command (not --join).
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvraft restore", flag.ContinueOnError)
	file := fs.String("snapshot", "", "the snapshot file (kvraft snapshot, GET /snapshot) (required)")
	id := fs.Uint64("id", 0, "the new node's raft ID (required)")
	peers := fs.String("peers", "", "the new cluster's members, ID=HOST:PORT,... (required)")
	data := fs.String("data", "", "the data directory to make: must not exist or be empty (required)")
	token := fs.String("cluster-token", raftkv.DefaultClusterToken, "the new cluster's token (as its nodes will be started with)")
	dirMode := fs.String("data-mode", "0700", "permissions of the data directory and the raft log's directories made (as for a node: their files get it without execute bits; the engine's are always 0700 and 0600)")
	if code, ok := parseCommand(fs, args, restoreHelp, stdout, stderr); !ok {
		return code
	}
	bad := func(format string, a ...any) int { return usageErr(fs, stderr, format, a...) }
	pm, perr := parsePeers(*peers)
	mode, merr := strconv.ParseUint(*dirMode, 8, 32)
	switch {
	case *file == "":
		return bad("--snapshot is required")
	case *id == 0:
		return bad("--id is required (a non-zero raft ID)")
	case perr != nil:
		return bad("--peers: %v", perr)
	case pm[*id] == "":
		return bad("--peers has no entry for node %d", *id)
	case *data == "":
		return bad("--data is required")
	case merr != nil || mode&^0o777 != 0 || mode&0o700 != 0o700:
		return bad("--data-mode %q: an octal mode with rwx for the owner", *dirMode)
	}
	f, err := os.Open(*file)
	if err != nil {
		fmt.Fprintf(stderr, "kvraft restore: %v\n", err)
		return exitError
	}
	defer f.Close()
	idx, err := raftkv.Restore(ctx, &raftkv.Options{ID: *id, Peers: pm, Dir: *data, ClusterToken: *token, DirMode: os.FileMode(mode)}, f)
	if err != nil {
		fmt.Fprintf(stderr, "kvraft restore: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "restored node %d of a new cluster at index %d into %s\n", *id, idx, *data)
	return exitOK
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// snapshotHelp is kvraft snapshot -h's text; the flags follow it.
const snapshotHelp = `Usage: kvraft snapshot --endpoint HOST:PORT --out FILE [flags]

Saves a snapshot of a running node's engine (GET /snapshot) to FILE.
'kvraft restore' makes a new cluster's data directories from it.

Flags:
`

// restoreHelp is kvraft restore -h's text; the flags follow it.
const restoreHelp = `Usage: kvraft restore --snapshot FILE --id N --peers 1=HOST:PORT,... --data DIR [flags]

Makes DIR the data directory of node N of a new cluster holding the snapshot's
content. Restore every node of the new cluster from the same snapshot with the
same --peers, then start each with its usual command (not --join).

Flags:
`
