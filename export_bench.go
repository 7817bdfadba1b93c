package kvbuf

import (
	"github.com/kvbuf/kvbuf/internal/enginehook"
	"github.com/kvbuf/kvbuf/storage"
)

// Benchmark and test hook: registers accessors to the engine's store and
// keyspace ids in internal/enginehook, which only this module can import.
// internal/bench reads a key back from the store after Flush returns (W4's
// exact coverage check) and gives its raw pebble baselines the engine's
// stored key layout. Nothing here changes the engine's behaviour.
func init() {
	enginehook.Store = func(db any) *storage.Store { return db.(*DB).store }
	enginehook.KeyspaceID = func(kv any) storage.KeyspaceID { return kv.(*KV).id }
}
