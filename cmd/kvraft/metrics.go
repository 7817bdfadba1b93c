package main

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvbuf/kvbuf/kvbufprom"
	"github.com/kvbuf/kvbuf/raftkv"
)

// metricsHandler serves GET /metrics: the Prometheus text format of the
// node's metrics, every one with the label node="ID":
//
//   - the engine's (package kvbufprom, kvbuf_*: the live engine's; a
//     snapshot install replaces it, and its counters restart at zero);
//   - raft's and the node's (kvraft_*), read from Node.Status at each
//     scrape (raftCollector below);
//   - the process's and the Go runtime's (process_*, go_*).
func metricsHandler(n *raftkv.Node) http.Handler {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": strconv.FormatUint(n.ID(), 10)}
	reg.MustRegister(
		kvbufprom.NewCollectorFunc(n.EngineMetrics, &kvbufprom.Options{ConstLabels: labels}),
		newRaftCollector(n, labels),
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		prometheus.NewGoCollector(),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// raftMetric is one metric of raftCollector: its name, help, type and the
// value it takes from a node's status.
type raftMetric struct {
	name, help string
	kind       prometheus.ValueType
	value      func(st *raftkv.Status) float64
}

var raftMetrics = []raftMetric{
	{"kvraft_term", "The raft term.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.Term) }},
	{"kvraft_commit_index", "The highest log index known committed.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.Commit) }},
	{"kvraft_applied_index", "The highest log index applied to the engine.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.Applied) }},
	{"kvraft_apply_lag_entries", "Committed entries not applied yet (commit - applied).", prometheus.GaugeValue, func(st *raftkv.Status) float64 {
		return float64(st.Commit - min(st.Applied, st.Commit))
	}},
	{"kvraft_watermark", "The engine's durable watermark: entries up to it survive a crash without replay.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.Watermark) }},
	{"kvraft_log_first_index", "The first index in the raft log store (entries below were compacted).", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.LogFirst) }},
	{"kvraft_log_last_index", "The last index in the raft log store.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.LogLast) }},
	{"kvraft_leader", "The leader's node ID as this node knows it (0: none).", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(st.Leader) }},
	{"kvraft_is_leader", "1 if this node is the leader, else 0.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return b2f(st.State == "leader") }},
	{"kvraft_has_leader", "1 if this node knows a leader, else 0.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return b2f(st.Leader != 0) }},
	{"kvraft_voters", "Voting members of the cluster.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(len(st.Voters)) }},
	{"kvraft_learners", "Learners of the cluster.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return float64(len(st.Learners)) }},
	{"kvraft_stopped", "1 if the node stopped (see /status's error), else 0.", prometheus.GaugeValue, func(st *raftkv.Status) float64 { return b2f(st.Err != "") }},
	{"kvraft_leader_changes_total", "Times this node saw a new leader.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.LeaderChanges) }},
	{"kvraft_elections_total", "Elections this node started as a candidate.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Elections) }},
	{"kvraft_applied_entries_total", "Entries applied since the node started.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Applied) }},
	{"kvraft_proposals_dropped_total", "Writes raft refused (ErrProposalDropped: no leader, a transfer, too much uncommitted).", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.ProposalsDropped) }},
	{"kvraft_send_errors_total", "Failed transport requests to peers.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.SendErrors) }},
	{"kvraft_send_refused_total", "Transport requests a peer refused as another cluster's or another node's.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Rejected) }},
	{"kvraft_snapshots_sent_total", "Snapshots streamed to followers.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.SnapshotsSent) }},
	{"kvraft_snapshot_send_failures_total", "Snapshot streams to followers that failed.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.SnapshotsFailed) }},
	{"kvraft_snapshots_received_total", "Snapshots received and staged.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.SnapshotsReceived) }},
	{"kvraft_snapshots_installed_total", "Snapshots this node switched its engine to.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.SnapshotsInstalled) }},
	{"kvraft_compactions_total", "Log compactions.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Compactions) }},
	{"kvraft_read_index_rounds_total", "ReadIndex rounds of linearizable reads.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.ReadRounds) }},
	{"kvraft_read_index_retries_total", "ReadIndex rounds asked again (no answer in time).", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.ReadRetries) }},
	{"kvraft_restart_redelivered_total", "Entries redelivered after the restart at or below the engine's watermark (no-ops).", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Redelivered) }},
	{"kvraft_restart_reapplied_total", "Entries re-applied after the restart above the engine's watermark.", prometheus.CounterValue, func(st *raftkv.Status) float64 { return float64(st.Metrics.Reapplied) }},
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// raftCollector reports raftMetrics, reading the node's status once per
// scrape.
type raftCollector struct {
	n     *raftkv.Node
	descs []*prometheus.Desc
}

func newRaftCollector(n *raftkv.Node, labels prometheus.Labels) *raftCollector {
	c := &raftCollector{n: n}
	for _, m := range raftMetrics {
		c.descs = append(c.descs, prometheus.NewDesc(m.name, m.help, nil, labels))
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Status()
	for i, m := range raftMetrics {
		ch <- prometheus.MustNewConstMetric(c.descs[i], m.kind, m.value(&st))
	}
}
