// Package enginehook holds accessors into a kvbuf engine's internals for
// benchmarks and tests inside this module. The root package sets them once,
// in an init function (export_bench.go); nothing else assigns them. They are
// not part of the engine's API: internal/bench uses Store and KeyspaceID to
// read a key back from the engine's pebble store after Flush returns, to
// count flush coverage violations exactly (workload W4 in
// doc/workloads.md), and to build raw pebble baselines with the same stored
// keys as the engine's.
package enginehook

import "github.com/kvbuf/kvbuf/storage"

var (
	// Store returns the storage.Store under a *kvbuf.DB.
	Store func(db any) *storage.Store

	// KeyspaceID returns the storage keyspace id of a *kvbuf.KV.
	KeyspaceID func(kv any) storage.KeyspaceID
)
