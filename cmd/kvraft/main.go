// Command kvraft runs one node of a replicated kvbuf cluster (package
// raftkv): a raft peer whose state machine is a kvbuf engine, serving the
// raft transport and a small HTTP API on one address. Its client commands
// print the cluster's status, save a backup of a running node, and make a
// new cluster's data directories from one.
//
// Usage:
//
//	kvraft --id N --peers 1=HOST:PORT,2=HOST:PORT,... [flags]
//	kvraft status --endpoints HOST:PORT,... [--json] [client flags]
//	kvraft snapshot --endpoint HOST:PORT --out FILE [client flags]
//	kvraft restore --snapshot FILE --id N --peers ... --data DIR
//
// Start one process per node with the same --peers (and --cluster-token);
// each serves on its own entry of --peers unless --http says otherwise. A
// node added later to a running cluster (POST /members/ID?addr=HOST:PORT
// on a member adds it as a learner) starts with --join, its --id and
// --data, and the members in --peers; once it has caught up, POST
// /members/ID/promote makes it a voter.
//
// HTTP API (keys and names are path segments; escape "/" as %2F):
//
//	PUT    /keyspaces/NAME                 create a keyspace (replicated)
//	GET    /keyspaces                      list keyspaces and bitslices
//	PUT    /bitslices/NAME                 create a bitslice
//	PUT    /kv/KS/KEY                      put the request body as the value
//	POST   /kv/KS                          pipelined writes: one JSON object per line, {"key": K, "value": V},
//	                                       {"key": K, "delete": true} (key_b64 / value_b64 for bytes), at most
//	                                       10000; applied in order, proposed together; 200 with one result per
//	                                       line, {"status": 204} or {"status": CODE, "error": TEXT}
//	GET    /kv/KS/KEY                      the value (404 if absent)
//	DELETE /kv/KS/KEY                      delete a key
//	DELETE /kv/KS?start=A&end=B            delete [A, B) (either may be omitted; ?all=1 for everything)
//	GET    /kv/KS?prefix=P&limit=N         scan by prefix (JSON, key order, default limit 1000, at most 100000);
//	                                       "more": true means a next page: repeat with &after=NEXT ("next" of the
//	                                       answer; &after_b64= with "next_b64" for a key that is not UTF-8)
//	PUT    /bits/NAME/I                    set bit I to the body: 1 or 0
//	GET    /bits/NAME/I                    bit I: 1 or 0
//	GET    /status[?digest=1]              raft term, commit and applied index, kvbuf watermark, members, metrics[, content digest]
//	GET    /health                         200 if the node runs, knows a leader and has applied to within
//	                                       --health-max-lag entries of its commit index, else 503 with the problems
//	GET    /metrics                        Prometheus metrics: the engine's (kvbuf_*), raft's and the node's (kvraft_*)
//	GET    /snapshot[?digest=1]            a backup: the engine as of one applied index (kvbuf's snapshot stream;
//	                                       the index in the X-Kvraft-Snapshot-Index header, with ?digest=1 the
//	                                       content digest in the X-Kvraft-Snapshot-Digest trailer)
//	GET    /members                        the members: ID, address, role (voter or learner)
//	POST   /members/ID?addr=HOST:PORT      add a node as a learner (no quorum change; then start it with --join)
//	POST   /members/ID/promote             make a caught-up learner a voter (409 until it is caught up: retry)
//	PUT    /members/ID/addr                move a member: the body is its new HOST:PORT
//	DELETE /members/ID                     remove a node (its ID is never used again)
//
// Writes are acknowledged (204) once applied on the leader; a follower
// forwards them to the leader. Reads are linearizable; add ?stale=1 to
// read a follower's state without asking the leader. Errors are JSON
// {"error": "..."} with 400 (bad request), 401 (a write or admin call
// without credentials), 404 (unknown key, keyspace, bitslice or member),
// 409 (a membership mistake: a removed ID, an existing member, the last
// voter, a learner not caught up), 413 (value too large), 503 (no leader,
// node stopped, another membership change pending: retry) or 504 (the
// write's outcome is unknown: it may still be applied).
//
// # Security
//
// With --tls-cert, --tls-key and --peer-ca the node serves HTTPS, and
// peers authenticate each other with certificates of the cluster's CA
// (--peer-ca; each node's certificate allows server and client
// authentication and names its host). Writes and admin calls (the PUT and
// DELETE requests, the member API, GET /snapshot) then need a bearer token
// (--token-file; "Authorization: Bearer TOKEN") or a client certificate of
// --client-ca; reads, /status, /health and /metrics do not. Without TLS the
// node serves plain HTTP, on a loopback address only unless --insecure.
// The data directory and the raft log are created 0700 and their files
// 0600 (--data-mode sets another mode; files get it without the execute
// bits); the engine's directories are always 0700 and its files 0600.
//
// Exit status: 0 after SIGINT or SIGTERM (a clean shutdown), 1 on an error
// (one line on stderr: a bad data directory, a node that stopped, a node
// whose data directory was wiped and that the cluster refuses), 2 on a
// usage error. The client commands exit 0 on success, 1 on an error (for
// status: an endpoint that did not answer, or a node that stopped), 2 on a
// usage error.
//
// # Caveats
//
//   - Node IDs are never reused: a wiped node rejoins under a new ID.
//   - Every node must run with the same engine limits (the default ones:
//     kvbuf's MaxKeySize and MaxValueSize), or an entry one node accepts
//     another refuses.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvbuf/kvbuf/raftkv"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// dispatch runs the command args name: a client command, or a node.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runStatus(ctx, args[1:], stdout, stderr)
		case "snapshot":
			return runSnapshot(ctx, args[1:], stdout, stderr)
		case "restore":
			return runRestore(ctx, args[1:], stdout, stderr)
		}
	}
	return run(ctx, args, stderr, nil)
}

// config is the parsed command line of a node.
type config struct {
	opts           raftkv.Options
	listen         string
	requestTimeout time.Duration
	logLevel       slog.Level
	maxLag         uint64
	sec            security
}

// usageText is kvraft -h's text; the flags follow it.
const usageText = `Usage: kvraft --id N --peers 1=HOST:PORT,2=HOST:PORT,... [flags]
       kvraft status --endpoints HOST:PORT,... [flags]
       kvraft snapshot --endpoint HOST:PORT --out FILE [flags]
       kvraft restore --snapshot FILE --id N --peers ... --data DIR

Runs one node of a replicated kvbuf cluster: the raft transport and the HTTP
API (see 'go doc ./cmd/kvraft') on one address. The client commands print the
cluster's status, save a snapshot of a running node, and make the data
directory of a new cluster's node from one ('kvraft COMMAND -h' for their flags).

Flags:
`

// parseCommand parses a command's flags. For -h it prints help, then the
// flags, to stdout; for a bad flag or an argument (no kvraft command takes
// one), one usage line to stderr (usageErr). ok is false when the caller
// should return code at once.
func parseCommand(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return exitOK, false
		}
		return usageErr(fs, stderr, "%v", err), false
	}
	if fs.NArg() > 0 {
		return usageErr(fs, stderr, "unexpected argument %q", fs.Arg(0)), false
	}
	return exitOK, true
}

// usageErr prints a usage error of fs's command in one line, ending with
// the hint to run the command with -h, and returns exitUsage.
func usageErr(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, fs.Name()+": "+format+" (run '"+fs.Name()+" -h' for the flags)\n", a...)
	return exitUsage
}

// parseArgs parses the command line; ok = false after a usage error or
// -h (code says which).
func parseArgs(args []string, stderr io.Writer) (cfg config, code int, ok bool) {
	fs := flag.NewFlagSet("kvraft", flag.ContinueOnError)
	id := fs.Uint64("id", 0, "this node's raft ID (non-zero, never reused) (required)")
	peers := fs.String("peers", "", "the initial members, ID=HOST:PORT,... (required; with --join: members to contact)")
	data := fs.String("data", "", "data directory (default kvraft-ID in the current directory)")
	listen := fs.String("http", "", "address to serve on (default: this node's entry in --peers)")
	join := fs.Bool("join", false, "join a running cluster that added this node instead of bootstrapping one")
	token := fs.String("cluster-token", raftkv.DefaultClusterToken, "cluster name: a node refuses another cluster's data directory and messages")
	tick := fs.Duration("tick", raftkv.DefaultTickInterval, "raft tick; elections take 10-20 ticks")
	retain := fs.Uint64("log-retain", raftkv.DefaultLogRetain, "entries kept below the durable watermark when the log is compacted")
	timeout := fs.Duration("request-timeout", 10*time.Second, "how long a request may wait for raft")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	maxLag := fs.Uint64("health-max-lag", 1000, "/health fails while the applied index trails the commit index by more entries")
	dirMode := fs.String("data-mode", "0700", "permissions of the data directory and the raft log's directories (their files get the same without execute bits: 0750 gives 0640); the engine's directories are always 0700 and its files 0600")
	var sec security
	sec.add(fs)
	if code, ok := parseCommand(fs, args, usageText, os.Stdout, stderr); !ok {
		return cfg, code, false
	}
	bad := func(format string, a ...any) (config, int, bool) {
		return cfg, usageErr(fs, stderr, format, a...), false
	}
	if *id == 0 {
		return bad("--id is required (a non-zero raft ID)")
	}
	pm, err := parsePeers(*peers)
	if err != nil {
		return bad("--peers: %v", err)
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return bad("--log-level %q", *level)
	}
	if *listen == "" {
		*listen = pm[*id]
		if *listen == "" {
			return bad("--http is required when --peers has no entry for node %d", *id)
		}
	}
	if *data == "" {
		*data = fmt.Sprintf("kvraft-%d", *id)
	}
	if *tick <= 0 || *timeout <= 0 {
		return bad("--tick and --request-timeout must be positive")
	}
	mode, err := strconv.ParseUint(*dirMode, 8, 32)
	if err != nil || mode&^0o777 != 0 || mode&0o700 != 0o700 {
		return bad("--data-mode %q: an octal mode with rwx for the owner (0700, 0750, 0755)", *dirMode)
	}
	if err := sec.check(*listen); err != nil {
		return bad("%v", err)
	}
	cfg.opts = raftkv.Options{
		ID:           *id,
		Peers:        pm,
		Dir:          *data,
		Join:         *join,
		ClusterToken: *token,
		TickInterval: *tick,
		LogRetain:    *retain,
		DirMode:      os.FileMode(mode),
	}
	cfg.listen, cfg.requestTimeout, cfg.maxLag, cfg.sec = *listen, *timeout, *maxLag, sec
	return cfg, exitOK, true
}

// parsePeers parses "1=host:port,2=host:port".
func parsePeers(s string) (map[uint64]string, error) {
	if s == "" {
		return nil, errors.New("required (ID=HOST:PORT,...)")
	}
	out := map[uint64]string{}
	for _, p := range strings.Split(s, ",") {
		idStr, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not ID=HOST:PORT", p)
		}
		id, err := strconv.ParseUint(idStr, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%q: the ID must be a non-zero number", p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", p, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("node %d listed twice", id)
		}
		out[id] = addr
	}
	return out, nil
}

// run runs a node until ctx ends (a clean shutdown, exit 0) or the node
// stops (exit 1). ready, if not nil, is called with the address served
// once the node runs (tests).
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) int {
	cfg, code, ok := parseArgs(args, stderr)
	if !ok {
		return code
	}
	cfg.opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	tlsCfg, err := cfg.sec.load(&cfg.opts)
	if err != nil {
		fmt.Fprintf(stderr, "kvraft: %v\n", err)
		return exitError
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		fmt.Fprintf(stderr, "kvraft: %v\n", err)
		return exitError
	}
	n, err := raftkv.Open(&cfg.opts)
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "kvraft: %v\n", err)
		return exitError
	}
	fwd := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, TLSClientConfig: cfg.opts.PeerTLS}
	s := &server{n: n, timeout: cfg.requestTimeout, maxLag: cfg.maxLag, auth: cfg.sec.auth, scheme: "http",
		client: &http.Client{Transport: fwd}}
	if tlsCfg != nil {
		s.scheme = "https"
		ln = tls.NewListener(ln, tlsCfg)
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.opts.Logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	cfg.opts.Logger.Info("kvraft: serving", "id", cfg.opts.ID, "addr", ln.Addr().String(), "tls", tlsCfg != nil,
		"data", cfg.opts.Dir, "peers", peersString(cfg.opts.Peers))
	if ready != nil {
		ready(ln.Addr().String())
	}
	code = exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "kvraft: serve: %v\n", err)
		code = exitError
	case <-n.Done():
		fmt.Fprintf(stderr, "kvraft: node %d stopped: %v\n", cfg.opts.ID, n.Err())
		code = exitError
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	fwd.CloseIdleConnections()
	if err := n.Close(); err != nil && code == exitOK {
		fmt.Fprintf(stderr, "kvraft: close: %v\n", err)
		code = exitError
	}
	cfg.opts.Logger.Info("kvraft: stopped", "id", cfg.opts.ID)
	return code
}

func peersString(p map[uint64]string) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, fmt.Sprintf("%d=%s", id, p[id]))
	}
	return strings.Join(parts, ",")
}
