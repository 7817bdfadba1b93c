package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// seqModel is the sequential model of one keyspace with sequence numbers:
// every change of every key and every range tombstone, by number, so that
// the state at any visible number can be computed (map plus sort).
type seqModel struct {
	points map[string][]seqChange // per key, in arrival order
	spans  []seqSpan
}

type seqChange struct {
	seq uint64
	val string
	del bool
}

type seqSpan struct {
	lo, hi string
	open   bool
	seq    uint64
}

func newSeqModel() *seqModel { return &seqModel{points: map[string][]seqChange{}} }

// at returns k's value at visible number vis (ok false: absent).
func (m *seqModel) at(k string, vis uint64) (string, bool) {
	var best seqChange
	found := false
	for _, c := range m.points[k] {
		if c.seq <= vis && (!found || c.seq > best.seq) {
			best, found = c, true
		}
	}
	for _, s := range m.spans {
		if s.seq <= vis && k >= s.lo && (s.open || k < s.hi) && (!found || s.seq > best.seq) {
			best, found = seqChange{seq: s.seq, del: true}, true
		}
	}
	if !found || best.del {
		return "", false
	}
	return best.val, true
}

// keysAt returns the keys present at vis within [lo, hi), sorted, as
// "k=v".
func (m *seqModel) keysAt(vis uint64, lo, hi *string) []string {
	var keys []string
	for k := range m.points {
		if lo != nil && k < *lo || hi != nil && k >= *hi {
			continue
		}
		if _, ok := m.at(k, vis); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		v, _ := m.at(k, vis)
		out[i] = k + "=" + v
	}
	return out
}

// seqRig is a KV overlay over a store written to by sequence number: each
// step reserves a block of numbers and applies its changes in a shuffled
// order (so that lower numbers often arrive after higher ones), then
// publishes the block.
type seqRig struct {
	*kvRig
	m      *seqModel
	floor  uint64 // visible number of the last generation released: reads at or above it are exact
	frozen []uint64
	// history: every active table is pinned before its first write, as
	// an open iterator pins it, so no record is rewritten in place (see
	// shard.reuse) and reads at any visible number from floor on are
	// exact. Without it, a read below the current visible number may
	// have to read again (probeRetry), but must never be wrong.
	history bool
	pinned  []*table
}

// pinActive pins the active table if it is not pinned yet (history only).
func (r *seqRig) pinActive() {
	a := r.kv.view.Load().active
	if !r.history || slices.Contains(r.pinned, a) {
		return
	}
	a.pins.Add(1)
	r.pinned = append(r.pinned, a)
}

// TestKVTableModel is the table-level property test: random blocks of puts
// (short and long keys; empty, inline, arena and large values),
// overwrites, deletes and range deletes, numbered out of arrival order;
// growth; freezes (seal and sort) and releases; every few steps point
// reads, GetMany and scans in both directions at random visible numbers
// between the last release and now, in both designs of the active table's
// order, compared with the model. The default build runs it with pooled
// tables on and off; -tags kvbuf_nopool runs it with pooling compiled out.
// Half the rounds pin every active table (history, as iterators do) and
// read anywhere between the last release and now; the others let writers
// rewrite records in place, and a read below now either matches the model
// or asks to read again.
func TestKVTableModel(t *testing.T) {
	seed := seedFor(t)
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(round)))
			opts := &Options{Shards: 1 << rng.IntN(4)}
			if round%2 == 1 {
				opts.PoolBytes = -1
			}
			r := &seqRig{kvRig: newKVRig(t, opts), m: newSeqModel(), history: round < 3}
			defer func() { unpinTables(r.pinned) }()
			if round%3 == 2 {
				r.kv.orderOf = (*table).resortOrder
			}
			steps := 400
			if raceEnabled {
				steps = 150
			}
			seqModelRun(t, rng, r, steps)
		})
	}
}

// tableKey returns key i of the test universe: mostly 1-24 bytes (in a
// slot), some longer (in the arena), some sharing their first 8 bytes.
func tableKey(i int) string {
	switch i % 7 {
	case 0:
		return fmt.Sprintf("k%d", i)
	case 1:
		return fmt.Sprintf("key-%020d", i) // 24 bytes: the longest in a slot
	case 2:
		return fmt.Sprintf("prefix--%d-a-long-key-in-the-arena", i) // shares "prefix--"
	case 3:
		return fmt.Sprintf("prefix--%d", i)
	case 4:
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(i))
		return string(b[:])
	case 5:
		return fmt.Sprintf("k%d\x00", i) // "k<i>" plus a zero byte: equal first words
	}
	return strings.Repeat("z", 1+i%40)
}

func tableValue(rng *rand.Rand, step int) string {
	switch rng.IntN(10) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("L", 100+rng.IntN(400)) // arena
	case 2:
		if rng.IntN(20) == 0 {
			return strings.Repeat("H", 200<<10) // a chunk of its own
		}
	case 3:
		return fmt.Sprintf("%-24d", step)[:17+rng.IntN(8)] // 17-24 bytes: inline only after a short key
	}
	v := fmt.Sprintf("v%d", step)
	return v[:1+rng.IntN(len(v))]
}

func seqModelRun(t *testing.T, rng *rand.Rand, r *seqRig, steps int) {
	universe := make([]string, 300)
	for i := range universe {
		universe[i] = tableKey(i)
	}
	randBound := func() *string {
		if rng.IntN(6) == 0 {
			return nil
		}
		k := universe[rng.IntN(len(universe))]
		if rng.IntN(3) == 0 {
			k += "\x00"
		}
		return &k
	}
	kv := r.kv
	for step := range steps {
		switch p := rng.IntN(100); {
		case p < 70:
			n := 1 + rng.IntN(40)
			seqs := kv.Seq().Reserve(n)
			first := seqs.Take(n)
			type op struct {
				seq uint64
				c   Change
			}
			ops := make([]op, n)
			for i := range ops {
				c := Change{Kind: ChangePut, Key: []byte(universe[rng.IntN(len(universe))])}
				switch q := rng.IntN(20); {
				case q < 3:
					c.Kind = ChangeDelete
				case q < 4:
					lo, hi := randBound(), randBound()
					if lo != nil && hi != nil && *lo > *hi {
						lo, hi = hi, lo
					}
					c = Change{Kind: ChangeDeleteRange, Key: bptr(lo), Value: bptr(hi)}
				default:
					c.Value = []byte(tableValue(rng, step))
				}
				ops[i] = op{first + uint64(i), c}
			}
			// Apply in a shuffled order, singly or as runs: numbers
			// arrive out of order.
			rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
			r.pinActive()
			r.bar.RLock()
			for i := 0; i < len(ops); {
				o := ops[i]
				var err error
				switch {
				case rng.IntN(2) == 0:
					// A run of consecutive numbers through ApplyAt.
					j := i + 1
					for j < len(ops) && ops[j].seq == ops[j-1].seq+1 {
						j++
					}
					cs := make([]Change, j-i)
					for x := range cs {
						cs[x] = ops[i+x].c
					}
					err = kv.ApplyAt(o.seq, cs)
					i = j
				case o.c.Kind == ChangePut:
					err = kv.putAt(o.seq, o.c.Key, o.c.Value)
					i++
				case o.c.Kind == ChangeDelete:
					err = kv.deleteAt(o.seq, o.c.Key)
					i++
				default:
					err = kv.deleteRangeAt(o.seq, o.c.Key, o.c.Value)
					i++
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			r.bar.RUnlock()
			seqs.Publish()
			for _, o := range ops {
				switch o.c.Kind {
				case ChangePut:
					k := string(o.c.Key)
					r.m.points[k] = append(r.m.points[k], seqChange{seq: o.seq, val: string(o.c.Value)})
				case ChangeDelete:
					k := string(o.c.Key)
					r.m.points[k] = append(r.m.points[k], seqChange{seq: o.seq, del: true})
				default:
					s := seqSpan{lo: string(o.c.Key), hi: string(o.c.Value), open: o.c.Value == nil, seq: o.seq}
					if s.open || s.lo < s.hi {
						r.m.spans = append(r.m.spans, s)
					}
				}
			}
		case p < 80:
			if r.freeze() {
				r.frozen = append(r.frozen, kv.Seq().Visible())
			}
		case p < 88:
			if len(r.queue) > 0 && r.write(rng.IntN(5) == 0) {
				r.release()
				r.floor, r.frozen = r.frozen[0], r.frozen[1:]
				r.checkStore(t, universe, fmt.Sprintf("step %d: store", step))
			}
		default:
			vis := r.floor + rng.Uint64N(kv.Seq().Visible()-r.floor+1)
			where := fmt.Sprintf("step %d at visible %d (floor %d, now %d)", step, vis, r.floor, kv.Seq().Visible())
			r.checkAt(t, rng, universe, vis, randBound, where)
		}
	}
	r.flush()
	r.floor = kv.Seq().Visible()
	r.checkStore(t, universe, "store after the final flush")
	if n := kv.PendingBytes(); n != 0 {
		t.Fatalf("PendingBytes after the final flush = %d", n)
	}
}

// checkAt compares point reads, GetMany and scans at visible number vis
// with the model.
func (r *seqRig) checkAt(t *testing.T, rng *rand.Rand, universe []string, vis uint64, randBound func() *string, where string) {
	t.Helper()
	kv := r.kv
	v := kv.view.Load()
	now := kv.Seq().Visible()
	mayRetry := !r.history && vis < now
	for _, k := range universe {
		h, kw := keyHash(k, kv.seed)
		got, kind := v.getAppend(nil, k, h, kw, vis)
		if kind == probeRetry {
			if !mayRetry {
				t.Fatalf("%s: Get(%q) asked to read again", where, k)
			}
			continue
		}
		want, ok := r.m.at(k, vis)
		var err error
		if kind == probeAbsent {
			got, err = r.st.Get(kv.ks, []byte(k))
		} else if kind == probeDeleted {
			err = kverr.ErrNotFound
		}
		switch {
		case ok && (err != nil || string(got) != want):
			t.Fatalf("%s: Get(%q) = %.40q, %v; want %.40q", where, k, got, err, want)
		case !ok && !errors.Is(err, kverr.ErrNotFound):
			t.Fatalf("%s: Get(%q) = %.40q, %v; want not found", where, k, got, err)
		}
	}
	keys := make([][]byte, 1+rng.IntN(3*manyBatch))
	for i := range keys {
		keys[i] = []byte(universe[rng.IntN(len(universe))])
	}
	vals := make([][]byte, len(keys))
	_, err := getMany(keys, vals, nil, kv.seed, v, vis, r.st, kv.ks)
	switch {
	case err == errReadAgain && mayRetry:
	case err != nil:
		t.Fatalf("%s: GetMany: %v", where, err)
	}
	for i, k := range keys {
		if err != nil {
			break
		}
		want, ok := r.m.at(string(k), vis)
		if ok != (vals[i] != nil) || ok && string(vals[i]) != want {
			t.Fatalf("%s: GetMany[%d] (%q) = %.40q (nil %v); want %.40q (present %v)", where, i, k, vals[i], vals[i] == nil, want, ok)
		}
	}
	lo, hi := randBound(), randBound()
	if lo != nil && hi != nil && *lo > *hi {
		lo, hi = hi, lo
	}
	if !r.history {
		// An iterator pins its tables before it loads its visible
		// number, never after: without history, scan at now.
		vis = now
	}
	want := r.m.keysAt(vis, lo, hi)
	for _, d := range append([]orderDesign{{"the KV's", kv.orderOf}}, orderDesigns...) {
		it := r.iterAt(t, vis, d.orderOf, lo, hi)
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: forward scan [%s, %s) (order %s)\n got %.300q\nwant %.300q", where, show(lo), show(hi), d.name, got, want)
		}
		got = got[:0]
		for ok := it.Last(); ok; ok = it.Prev() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		slices.Reverse(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: backward scan [%s, %s) (order %s)\n got %.300q\nwant %.300q", where, show(lo), show(hi), d.name, got, want)
		}
		// Seeks land on the model's next and previous keys.
		if len(want) > 0 {
			w := want[rng.IntN(len(want))]
			k := w[:strings.LastIndexByte(w[:min(len(w), 64)], '=')]
			if !it.SeekGE([]byte(k)) || string(it.Key())+"="+string(it.Value()) != w {
				t.Fatalf("%s: SeekGE(%q) at %q", where, k, it.Key())
			}
			if it.SeekLT([]byte(k)) && string(it.Key()) >= k {
				t.Fatalf("%s: SeekLT(%q) at %q", where, k, it.Key())
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// iterAt is KV.NewIter at visible number vis with the given order design
// (a KV.orderOf value).
func (r *seqRig) iterAt(t *testing.T, vis uint64, orderOf func(*table) (*order, []sortEnt), lo, hi *string) *Iter {
	kv := r.kv
	kv.vmu.Lock()
	v := kv.view.Load()
	ts := append([]*table{v.active}, v.sealed...)
	for _, tb := range ts {
		tb.pins.Add(1)
	}
	st, err := r.st.NewIter(kv.ks, bptr(lo), bptr(hi))
	kv.vmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return newIter(ts, vis, orderOf, st, bptr(lo), bptr(hi), func() { unpinTables(ts) })
}

// checkStore compares the store with the model at the last release.
func (r *seqRig) checkStore(t *testing.T, universe []string, where string) {
	t.Helper()
	for _, k := range universe {
		got, err := r.st.Get(r.kv.ks, []byte(k))
		want, ok := r.m.at(k, r.floor)
		switch {
		case ok && (err != nil || string(got) != want):
			t.Fatalf("%s: %q = %.40q, %v; want %.40q", where, k, got, err, want)
		case !ok && !errors.Is(err, kverr.ErrNotFound):
			t.Fatalf("%s: %q = %.40q, %v; want not found", where, k, got, err)
		}
	}
}

// TestProbeKeyWords checks the slot words and hash of keys of every length
// against a byte-by-byte construction.
func TestProbeKeyWords(t *testing.T) {
	seed := rand.Uint64()
	for n := range 40 {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte(0x11 * (i + 1))
		}
		pk := makeProbeKey(string(k), seed)
		if n <= inlineBytes {
			var b [inlineBytes]byte
			copy(b[:], k)
			want := [3]uint64{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
			if pk.nw != keyWords(n) || pk.w != want {
				t.Errorf("%d bytes: words %d %x, want %d %x", n, pk.nw, pk.w, keyWords(n), want)
			}
		} else if pk.nw != 0 {
			t.Errorf("%d bytes: %d slot words, want 0", n, pk.nw)
		}
		h, w := keyHash(string(k), seed)
		if h != pk.h || h != hashKey(string(k), seed) || n <= 8 && w != pk.w[0] {
			t.Errorf("%d bytes: keyHash %x %x, probe key %x %x, hashKey %x", n, h, w, pk.h, pk.w[0], hashKey(string(k), seed))
		}
		// A key that differs in one byte hashes differently (almost
		// surely), and so does the same key under another seed.
		if n > 0 {
			k2 := bytes.Clone(k)
			k2[n-1]++
			if hashKey(string(k2), seed) == pk.h || hashKey(string(k), seed+1) == pk.h {
				t.Errorf("%d bytes: hash ignores the last byte or the seed", n)
			}
		}
	}
}

// TestKVChainLinkInNewChunk: a reader walking a key's versions loads the
// arena directory after the slot's head, then follows prev links. A change
// numbered below the head (a concurrent batch applied out of order) is
// linked in below it meanwhile, its record in a chunk added after the
// reader loaded the directory: the reader must still resolve it and reach
// the visible version beneath, not take the chain for garbage (the key
// then looked absent from the table and an older table answered: a live
// reader saw part of a batch).
func TestKVChainLinkInNewChunk(t *testing.T) {
	tb := newTable(1, 7)
	tb.base.Store(1)
	pk := makeProbeKey("shared-00", tb.seed)
	sh := tb.shardFor(pk.h)
	write := func(v string, seq uint64) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		sh.setLocked(tb, &pk, []byte(v), false, seq, nil)
	}
	write("v10", 10)
	write("v30", 30) // a chain: 30 -> 10
	// The reader: slot words (the head), then the directory.
	_, sw := sh.arr.Load().find(&pk, sh)
	d := sh.dir.Load()
	// The writer: the current chunk is full, so the record of change 20
	// goes to a new chunk, linked below the head.
	sh.mu.Lock()
	sh.aw.fill = len(sh.aw.cur)
	sh.mu.Unlock()
	write("v20", 20)
	if sh.dir.Load() == d {
		t.Fatal("no chunk was added: the test does not test the race")
	}
	for _, c := range []struct {
		vis  uint64
		want string
	}{{25, "v20"}, {15, "v10"}, {30, "v30"}} {
		v, st := chainVersionAt(sh, d, sw.w0&refMask, c.vis)
		if st != verFound || string(v.ext) != c.want {
			t.Errorf("at visible %d with the directory loaded before the link: %q, %v; want %q", c.vis, v.ext, st, c.want)
		}
	}
}

// TestSlotArraySizes checks the sizing of slot arrays of any number of
// groups: groupsFor holds n keys at most 7/8 full and no more groups than
// that needs; growGroups grows by half (at least one group); home stays in
// range for every hash.
func TestSlotArraySizes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 14, 15, 1000, 114688, 114689, 1 << 20} {
		g := groupsFor(n)
		if g < minGroups || g*groupSlots*7/8 < n {
			t.Errorf("groupsFor(%d) = %d: holds %d keys", n, g, g*groupSlots*7/8)
		}
		if g > minGroups && (g-1)*groupSlots*7/8 >= n {
			t.Errorf("groupsFor(%d) = %d: %d groups would do", n, g, g-1)
		}
	}
	for _, g := range []uint64{1, 2, 3, 4, 5, 1000, 18207} {
		ng := uint64(growGroups(g))
		if ng <= g || ng < g+g/2 || ng > g+g/2+1 {
			t.Errorf("growGroups(%d) = %d, want %d (at least %d)", g, ng, g+g/2, g+1)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range []int{1, 3, 5, 7, 1000, 18207} {
		a := newSlotArray(g)
		for _, h := range []uint64{0, ^uint64(0), 1<<39 - 1, 1 << 38} {
			if hg := a.home(h); hg >= uint64(g) {
				t.Fatalf("%d groups: home(%#x) = %d", g, h, hg)
			}
		}
		for range 1000 {
			if h := rng.Uint64(); a.home(h) >= uint64(g) {
				t.Fatalf("%d groups: home(%#x) = %d", g, h, a.home(h))
			}
		}
	}
}

// TestSlotArrayProbeWraps fills arrays of a few sizes (not powers of two)
// with keys that all start their probe in the last group, so that every
// key after the first group's seven wraps around to group 0 and on: each
// must be found, and a key not placed must not be.
func TestSlotArrayProbeWraps(t *testing.T) {
	for _, groups := range []int{1, 3, 5, 6} {
		a := newSlotArray(groups)
		// A hash whose home is the last group: the largest 32-bit value
		// of bits 7-38 maps to groups-1.
		h := uint64(1<<32-1) << 7
		if a.home(h) != uint64(groups-1) {
			t.Fatalf("%d groups: home %d, want the last group", groups, a.home(h))
		}
		hashOf := func(i int) uint64 { return h | uint64(i)<<55 | uint64(i)&0x7f } // preferred slots and tags vary
		keys := make([]string, a.maxKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%04d", i)
			pk := probeKeyOf(keys[i], hashOf(i))
			a.place(pk.h, slotWords{w0: uint64(len(keys[i])) << klenShift, w1: pk.w[0]})
		}
		for i, k := range keys {
			pk := probeKeyOf(k, hashOf(i))
			if j, _ := a.find(&pk, nil); j < 0 {
				t.Fatalf("%d groups: key %d of %d not found", groups, i, len(keys))
			}
		}
		pk := probeKeyOf("absent", h|3)
		if j, _ := a.find(&pk, nil); j >= 0 {
			t.Fatalf("%d groups: an absent key found in slot %d", groups, j)
		}
	}
}
