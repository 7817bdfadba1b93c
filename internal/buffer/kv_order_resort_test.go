package buffer

// resortOrder is the key order design that table.orderFor's sorted runs
// were measured against (doc/design.md, "KV tables"): any key logged after
// the cached order makes the next iterator sort the whole table again, and
// that sort is cached until the next new key. Tests and benchmarks select
// it with the KV.orderOf hook: the W2 first-iter-1m and W2Interleaved
// kvbuf-resort rows, and the sequence model's iterators.
func (t *table) resortOrder() (*order, []sortEnt) {
	ss := t.shards.Load()
	if ss == nil {
		return nil, nil
	}
	if o := t.ord.Load(); o != nil && o.current(ss) && len(o.tail()) == 0 {
		return o, nil
	}
	t.ordMu.Lock()
	defer t.ordMu.Unlock()
	if o := t.ord.Load(); o != nil && o.current(ss) && len(o.tail()) == 0 {
		return o, nil // built meanwhile
	}
	next := t.fullOrder(ss, 1)
	t.ord.Store(next)
	return next, nil
}

// orderDesign names an order design for tests and benchmarks: orderOf is
// the KV.orderOf hook's value (nil: table.orderFor, the engine's).
type orderDesign struct {
	name    string
	orderOf func(*table) (*order, []sortEnt)
}

var orderDesigns = []orderDesign{{"runs", nil}, {"resort", (*table).resortOrder}}
