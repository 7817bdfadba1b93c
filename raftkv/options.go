package raftkv

import (
	"crypto/tls"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/kvbuf/kvbuf"
)

// Defaults of Options (each field's comment says what it bounds).
const (
	// DefaultClusterToken is Options.ClusterToken's default.
	DefaultClusterToken = "kvraft"
	// DefaultTickInterval is Options.TickInterval's default.
	DefaultTickInterval = 100 * time.Millisecond
	// DefaultElectionTicks is Options.ElectionTicks' default.
	DefaultElectionTicks = 10
	// DefaultHeartbeatTicks is Options.HeartbeatTicks' default.
	DefaultHeartbeatTicks = 1
	// DefaultLogRetain is Options.LogRetain's default.
	DefaultLogRetain = 10000
	// DefaultMaxSizePerMsg is Options.MaxSizePerMsg's default.
	DefaultMaxSizePerMsg = 1 << 20
	// DefaultMaxInflightMsgs is Options.MaxInflightMsgs' default.
	DefaultMaxInflightMsgs = 256
	// DefaultMaxUncommittedBytes is Options.MaxUncommittedBytes' default.
	DefaultMaxUncommittedBytes = 64 << 20
	// DefaultSendTimeout is Options.SendTimeout's default.
	DefaultSendTimeout = 5 * time.Second
	// DefaultSnapshotTimeout is Options.SnapshotTimeout's default.
	DefaultSnapshotTimeout = 10 * time.Minute
	// DefaultEngineFlushInterval is the engine's FlushInterval unless
	// Options.Engine sets one.
	DefaultEngineFlushInterval = 100 * time.Millisecond
	// DefaultMaxPendingMessages is Options.MaxPendingMessages' default.
	DefaultMaxPendingMessages = 4096
	// DefaultReadIndexRetry is Options.ReadIndexRetry's default.
	DefaultReadIndexRetry = 500 * time.Millisecond

	defaultMaxMessageBatchBytes = 8 << 20
)

// Options configures a Node. Open takes a pointer; a zero field means that
// field's default.
type Options struct {
	// ID is this node's raft ID: non-zero, unique in the cluster for all
	// time (a removed node's ID is never reused). Required.
	ID uint64

	// Peers maps the raft ID of every node of the initial cluster to its
	// address ("host:port" of its HTTP server, which serves the transport
	// under /raft/). When the node bootstraps a new cluster it must
	// include ID. When the node restarts, the addresses it learned from
	// the log (membership changes carry them) win over these; Peers fills
	// in the others. A node that joins (Join) lists the members it must
	// answer before it learns the membership from the leader (the leader
	// at least: list them all). Required.
	Peers map[uint64]string

	// Dir is the node's data directory: the raft log store (log/), the
	// engine (engine, or engine-<index> after a snapshot install), and
	// snapshots being received (*.staging). Created if missing. Required.
	Dir string

	// DirMode is the permission bits of the directories the node creates
	// in Dir (Dir itself, the log store); its files get the same less the
	// execute bits (0700: 0600). The engine directories are the engine's,
	// created 0700. Open warns about an existing Dir open to more.
	// Default: DefaultDirMode (0700, as etcd's data directory).
	DirMode os.FileMode

	// Join makes a node with an empty data directory wait for the
	// cluster's leader instead of bootstrapping a new cluster: the node
	// was added with Node.AddNode on a member, and learns the cluster ID
	// from the first message it receives. Ignored for a data directory
	// that already holds a log. Default: false.
	Join bool

	// ClusterToken names the cluster: with the initial Peers it makes the
	// cluster ID, which is stored in the data directory and sent with
	// every message, so that a node started with another cluster's data
	// directory, or a message from another cluster, is refused. Default:
	// DefaultClusterToken ("kvraft").
	ClusterToken string

	// TickInterval is the length of one raft tick. Default:
	// DefaultTickInterval (100ms).
	TickInterval time.Duration

	// ElectionTicks is raft's election timeout in ticks (randomized
	// between it and twice it). Default: DefaultElectionTicks (10).
	ElectionTicks int

	// HeartbeatTicks is the leader's heartbeat interval in ticks; below
	// ElectionTicks. Default: DefaultHeartbeatTicks (1).
	HeartbeatTicks int

	// LogRetain is how many applied entries below the engine's durable
	// watermark the log keeps when it is compacted, so that a follower a
	// little behind catches up from the log rather than a snapshot. The
	// log is never compacted above the durable watermark, and a leader
	// keeps more for followers that are catching up (see the package
	// documentation). Default: DefaultLogRetain (10000).
	LogRetain uint64

	// MaxSizePerMsg bounds the entries of one append message in bytes
	// (raft.Config.MaxSizePerMsg). Default: DefaultMaxSizePerMsg (1 MiB).
	MaxSizePerMsg uint64

	// MaxInflightMsgs bounds the append messages in flight to one
	// follower. Default: DefaultMaxInflightMsgs (256).
	MaxInflightMsgs int

	// MaxUncommittedBytes bounds the entries a leader holds uncommitted;
	// proposals beyond it fail with ErrProposalDropped (nothing written).
	// Default: DefaultMaxUncommittedBytes (64 MiB).
	MaxUncommittedBytes uint64

	// MaxPendingMessages bounds the messages queued for one peer; beyond
	// it messages are dropped (raft retransmits). Default:
	// DefaultMaxPendingMessages (4096).
	MaxPendingMessages int

	// SendTimeout bounds one transport request carrying messages. Default:
	// DefaultSendTimeout (5s).
	SendTimeout time.Duration

	// SnapshotTimeout bounds sending or receiving one snapshot. Default:
	// DefaultSnapshotTimeout (10 minutes).
	SnapshotTimeout time.Duration

	// ReadIndexRetry is how long a linearizable read waits for raft's
	// answer before asking again (a read index request is lost while
	// there is no leader). Default: DefaultReadIndexRetry (500ms).
	ReadIndexRetry time.Duration

	// Engine are the options of the node's kvbuf engine (and of engines
	// installed from snapshots). nil means kvbuf's defaults except
	// FlushInterval, which defaults to DefaultEngineFlushInterval (100ms):
	// the durable watermark, hence what a restart replays and how far the
	// log can be compacted, trails the applied index by about that much.
	Engine *kvbuf.Options

	// PeerTLS, if set, secures the transport with mutual TLS: requests go
	// to peers over HTTPS, presenting PeerTLS.Certificates (this node's
	// certificate, which must allow both server and client
	// authentication) and verifying the peer's certificate against
	// PeerTLS.RootCAs (the cluster's CA); and Handler refuses (403) a
	// request whose client certificate that CA did not sign. Serve
	// Handler over TLS with a server configuration that asks for client
	// certificates (tls.VerifyClientCertIfGiven or stricter) and presents
	// the same certificate. Default: nil, plain HTTP (no authentication:
	// loopback or a trusted network only).
	PeerTLS *tls.Config

	// Client sends the transport's requests. Default: a client with
	// keep-alive connections and no overall timeout (SendTimeout and
	// SnapshotTimeout bound each request), using PeerTLS. Tests pass one
	// whose RoundTripper drops, delays or partitions requests.
	Client *http.Client

	// Logger receives the node's and raft's log lines. Default: a logger
	// that discards them.
	Logger *slog.Logger
}

// resolve returns a copy of o with defaults filled in, or an error for a
// bad value.
func (o *Options) resolve() (*Options, error) {
	if o == nil {
		return nil, errorf("nil Options: %w", kvbuf.ErrBadOptions)
	}
	r := *o
	r.Peers = maps.Clone(o.Peers)
	if r.DirMode == 0 {
		r.DirMode = DefaultDirMode
	}
	if r.ClusterToken == "" {
		r.ClusterToken = DefaultClusterToken
	}
	if r.TickInterval == 0 {
		r.TickInterval = DefaultTickInterval
	}
	if r.ElectionTicks == 0 {
		r.ElectionTicks = DefaultElectionTicks
	}
	if r.HeartbeatTicks == 0 {
		r.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if r.LogRetain == 0 {
		r.LogRetain = DefaultLogRetain
	}
	if r.MaxSizePerMsg == 0 {
		r.MaxSizePerMsg = DefaultMaxSizePerMsg
	}
	if r.MaxInflightMsgs == 0 {
		r.MaxInflightMsgs = DefaultMaxInflightMsgs
	}
	if r.MaxUncommittedBytes == 0 {
		r.MaxUncommittedBytes = DefaultMaxUncommittedBytes
	}
	if r.MaxPendingMessages == 0 {
		r.MaxPendingMessages = DefaultMaxPendingMessages
	}
	if r.SendTimeout == 0 {
		r.SendTimeout = DefaultSendTimeout
	}
	if r.SnapshotTimeout == 0 {
		r.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if r.ReadIndexRetry == 0 {
		r.ReadIndexRetry = DefaultReadIndexRetry
	}
	var eng kvbuf.Options
	if o.Engine != nil {
		eng = *o.Engine
	}
	if eng.FlushInterval == 0 {
		eng.FlushInterval = DefaultEngineFlushInterval
	}
	r.Engine = &eng
	if r.Client == nil {
		r.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // peers are reached directly, never through a proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     r.PeerTLS,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case r.ID == 0:
		return nil, errorf("ID 0 (node IDs are non-zero): %w", kvbuf.ErrBadOptions)
	case r.Dir == "":
		return nil, errorf("no Dir: %w", kvbuf.ErrBadOptions)
	case len(r.Peers) == 0:
		return nil, errorf("no Peers: %w", kvbuf.ErrBadOptions)
	case r.TickInterval < 0 || r.ElectionTicks < 0 || r.HeartbeatTicks < 0:
		return nil, errorf("negative tick setting: %w", kvbuf.ErrBadOptions)
	case r.HeartbeatTicks >= r.ElectionTicks:
		return nil, errorf("HeartbeatTicks %d not below ElectionTicks %d: %w", r.HeartbeatTicks, r.ElectionTicks, kvbuf.ErrBadOptions)
	case r.DirMode&^os.ModePerm != 0 || r.DirMode&0o700 != 0o700:
		return nil, errorf("DirMode %#o (permission bits with rwx for the owner): %w", uint32(r.DirMode), kvbuf.ErrBadOptions)
	case r.MaxInflightMsgs < 0 || r.MaxPendingMessages < 0:
		return nil, errorf("negative message limit: %w", kvbuf.ErrBadOptions)
	case r.PeerTLS != nil && (r.PeerTLS.RootCAs == nil || len(r.PeerTLS.Certificates) == 0 && r.PeerTLS.GetClientCertificate == nil):
		return nil, errorf("PeerTLS needs RootCAs (the cluster's CA) and this node's certificate: %w", kvbuf.ErrBadOptions)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Peers)) {
		if id == 0 {
			return nil, errorf("peer ID 0: %w", kvbuf.ErrBadOptions)
		}
		if _, _, err := net.SplitHostPort(r.Peers[id]); err != nil {
			return nil, errorf("peer %d address %q: %v: %w", id, r.Peers[id], err, kvbuf.ErrBadOptions)
		}
	}
	if err := r.Engine.Validate(); err != nil {
		return nil, errorf("Engine: %w: %w", err, kvbuf.ErrBadOptions)
	}
	return &r, nil
}
