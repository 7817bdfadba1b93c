package kvbuf

import (
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/buffer"
)

// readTier is the engine's read tier: the tables of recently flushed
// generations, kept readable by their overlays after the generation is
// durable, within a memory budget of their own (Options.ReadTierBytes),
// evicted a whole generation at a time, oldest first. The rules that make
// it safe are the overlay's (internal/buffer/kv_tier.go, tier rules T1-T6); this
// side keeps T2: every released generation is retained, in order, and
// eviction takes the oldest.
type readTier struct {
	mu   sync.Mutex // guards gens; Release (the flusher's waiter) and Close use it
	gens []tierGen  // oldest first

	bytes   atomic.Int64 // memory held, for Metrics
	evicted atomic.Int64 // generations evicted
	// compactions counts the generations whose tables were compacted as
	// they were retained (tier rule T6), for tests.
	compactions atomic.Int64

	// noFilters turns the tables' filters off (tier rule T5): set by
	// BenchmarkMissRead before the first flush, to compare.
	noFilters bool
}

type tierGen struct {
	g     uint64
	bytes int64
	kvs   []*buffer.KVGen
}

// maxTierGenerations bounds the generations the tier holds: a read that
// misses the buffer probes a table of each, so many small generations
// (interval flushes of a trickle of writes) would make every miss slower
// for little gain.
const maxTierGenerations = 4

// retain moves gen's KV tables into the tier (tier rules T1, T2), then
// evicts the oldest generations until the tier holds at most budget bytes
// and maxTierGenerations generations (possibly gen itself: a generation
// larger than the budget is not kept, nor is anything older).
func (rt *readTier) retain(gen *generation, budget int64) {
	tg := tierGen{g: gen.g}
	// Tier rule T6: the tables are compacted unless even compacted the
	// generation is over the budget (then the copy is wasted: the loop
	// below evicts it at once).
	var held, compacted int64
	for _, k := range gen.kvs {
		h, c := k.TierBytes()
		held += h
		compacted += c
	}
	if compacted <= budget && compacted < held {
		rt.compactions.Add(1)
	}
	for _, k := range gen.kvs {
		tg.bytes += k.Retain(compacted <= budget)
		tg.kvs = append(tg.kvs, k)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(tg.kvs) > 0 {
		rt.gens = append(rt.gens, tg)
		rt.bytes.Add(tg.bytes)
	}
	for len(rt.gens) > 0 && (rt.bytes.Load() > budget || len(rt.gens) > maxTierGenerations) {
		old := rt.gens[0]
		rt.gens[0] = tierGen{}
		rt.gens = rt.gens[1:]
		for _, k := range old.kvs {
			k.Evict()
		}
		rt.bytes.Add(-old.bytes)
		rt.evicted.Add(1)
	}
	// The generation stayed: give its tables their filters (tier rule
	// T5), under mu so that no Evict recycles a table while its filter is
	// built. Not before the evictions: a generation over the budget would
	// pay for a filter it never uses (W6's 1M-key flush). The filters'
	// bytes count in the tier's memory.
	if n := len(rt.gens); n > 0 && rt.gens[n-1].g == gen.g && !rt.noFilters {
		var fb int64
		for _, k := range rt.gens[n-1].kvs {
			fb += k.Filter()
		}
		rt.gens[n-1].bytes += fb
		rt.bytes.Add(fb)
	}
}

// generations returns the number of generations in the tier.
func (rt *readTier) generations() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.gens)
}
