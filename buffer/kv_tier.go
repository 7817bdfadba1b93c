package buffer

// The read tier keeps the tables of recently flushed generations readable
// after they are durable, so that a key read again soon after its flush
// (skewed access) is answered from memory instead of by a store Get. The
// tables are already built, sorted and immutable: retaining one costs no
// copy, only the memory it already holds. The engine gives the tier its
// own budget and evicts whole generations, oldest first (kvbuf's
// target.go); this file keeps the overlay's side.
//
// Tier rules (cited as "tier rule Tn" where the code keeps them):
//
//	T1. Retain publishes one view in which the generation's tables moved
//	    from the pending list to the head of the retained list. Reads probe
//	    pending tables before retained ones, in the same newest-first order,
//	    so a reader that loads either view finds the same change for every
//	    key.
//	T2. The retained tables are a suffix of the flushed generations: every
//	    generation is retained when it is released (in order), and eviction
//	    takes the oldest first. So for any key, a retained change is the
//	    newest flushed change of that key, or a newer retained or pending
//	    table holds a newer one: the tier never shadows a later flush, a
//	    later delete or a later range delete (each of which is in a newer
//	    table until it is evicted, and evicted only after the older ones).
//	T3. Evict publishes the view without the tables, then recycles the
//	    unpinned ones, as Release does: a reader that still loads the old
//	    view after its probes finished them before any clear began.
//	T4. Point reads (Get, GetAppend, GetMany, Has) probe the retained
//	    tables after every pending table and before the store, and
//	    re-validate the view after their probes like for pending tables.
//	    Iterators and snapshots do not read the tier: the store holds
//	    everything it holds (it is a suffix of what was flushed).

// Retain is Release that keeps the generation's tables readable as the
// newest generation of the overlay's read tier (tier rule T1), and returns
// the bytes they hold: no longer pending (the account is debited), held by
// the tier until Evict. Generations must be released or retained in order,
// and every one retained while the tier is in use (tier rule T2).
func (g *KVGen) Retain() int64 { return g.kv.retain(g.g) }

func (kv *KV) retain(g uint64) int64 {
	_, n := kv.cutGen(g, true)
	return n
}

// evict drops the retained tables of generations up to g from the read
// tier (tier rule T3) and returns the bytes they held. Evicting a
// generation the overlay does not retain is a no-op.
func (kv *KV) evict(g uint64) int64 {
	kv.vmu.Lock()
	v := kv.view.Load()
	cut := len(v.retained)
	for cut > 0 && v.retained[cut-1].gen <= g {
		cut--
	}
	if cut == len(v.retained) {
		kv.vmu.Unlock()
		return 0
	}
	gone := v.retained[cut:]
	// Publish first, clear after (publication order 6, as Release).
	kv.view.Store(&kvView{active: v.active, sealed: v.sealed, retained: v.retained[:cut:cut]})
	kv.vmu.Unlock()
	var n int64
	for _, t := range gone {
		n += t.bytes()
		kv.pool.put(t)
	}
	return n
}

// Evict is KV.evict of the generation: it drops the generation's tables
// (and any older ones) from the overlay's read tier.
func (g *KVGen) Evict() int64 { return g.kv.evict(g.g) }
