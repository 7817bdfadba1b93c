package buffer

import (
	"encoding/binary"
	"testing"
)

// TestFreshActiveSized: after a generation of n keys is frozen, a fresh
// active table (no pooled one) takes n other keys without growing any
// shard's slot array (newActive sizes it for the last table's keys, with
// room for the shards that take more than their share), and its arrays
// are no larger than those n keys need.
func TestFreshActiveSized(t *testing.T) {
	const n = 200_000
	kv, err := NewKV(nil, 1, nil, &Options{PoolBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(from uint64) {
		for i := range uint64(n) {
			k := binary.BigEndian.AppendUint64(nil, (from+i)*0x9e3779b97f4a7c15)
			if err := kv.Put(k, []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0)
	if g := kv.Freeze(1); g == nil {
		t.Fatal("Freeze returned no generation")
	}
	put(n)
	act := kv.view.Load().active
	if want := groupsFor(n / kv.opt.shards); act.groups < want {
		t.Fatalf("fresh table sized for %d groups a shard, fewer than the last table's %d keys need (%d)", act.groups, n, want)
	}
	if most := groupsFor(n/kv.opt.shards + n/kv.opt.shards/16); act.groups > most {
		t.Fatalf("fresh table sized for %d groups a shard, more than %d", act.groups, most)
	}
	for s, sh := range act.shards.Load().s {
		a := sh.arr.Load()
		if a == nil {
			t.Fatalf("shard %d has no slot array after %d puts", s, n)
		}
		if a.groups != uint64(act.groups) {
			t.Fatalf("shard %d's slot array grew from %d groups to %d", s, act.groups, a.groups)
		}
	}
}

// TestAdviseHuge: advising slot-array slices of every size and alignment
// (empty, small, just under and over the 4 MiB floor, an unaligned
// subslice) keeps their contents and never faults outside them.
func TestAdviseHuge(t *testing.T) {
	big := make([]uint64, 9<<20/8+3)
	for i := range big {
		big[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for _, s := range [][]uint64{nil, big[:1], big[:4<<20/8-1], big[:4<<20/8], big[3 : 9<<20/8], big} {
		adviseHuge(s)
	}
	for i := range big {
		if big[i] != uint64(i)*0x9e3779b97f4a7c15 {
			t.Fatalf("word %d changed by adviseHuge", i)
		}
	}
}

// TestPooledTableGrowthCharged: a table taken from the pool holds slot
// arrays that are not charged (the pool's bound covers them); when one of
// them grows, the old array goes to the garbage collector and the new one
// is memory nothing else bounds, so it is charged in full. Growth used to
// charge only the difference, so a pooled table that grew held arrays the
// pending budget never saw.
func TestPooledTableGrowthCharged(t *testing.T) {
	if !poolEnabled {
		t.Skip("pooling compiled out (kvbuf_nopool)")
	}
	var acct Account
	kv, err := NewKV(nil, 1, &acct, &Options{Shards: 1, PoolBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	put := func(from, n uint64) {
		for i := range n {
			k := binary.BigEndian.AppendUint64(nil, (from+i)*0x9e3779b97f4a7c15)
			if err := kv.Put(k, []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Generation 1's table goes to the pool when released; generation 3's
	// active table (made when generation 2 is frozen) comes from it.
	put(0, 1000)
	g1 := kv.Freeze(1)
	put(1000, 1000)
	g1.Release()
	g2 := kv.Freeze(2)
	g2.Release()
	act := kv.view.Load().active
	ss := act.shards.Load()
	if ss == nil || ss.s[0].arr.Load() == nil || !ss.s[0].arr.Load().cleared {
		t.Fatal("the active table after generation 2 is not the pooled one")
	}
	before := acct.Bytes()
	put(2000, 20_000) // grows the pooled array several times
	arr := ss.s[0].arr.Load()
	if arr.cleared {
		t.Fatal("the pooled array did not grow")
	}
	if got := acct.Bytes() - before; got < arr.bytes() {
		t.Fatalf("20k keys put into a pooled table charged %d bytes; its grown slot array alone holds %d", got, arr.bytes())
	}
	if got, want := act.bytes(), acct.Bytes()-before; got != want {
		t.Fatalf("the table holds %d bytes, the account was charged %d", got, want)
	}
}
