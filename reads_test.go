package kvbuf

import (
	"errors"
	"slices"
	"testing"
)

// KV.All and SnapshotKV.All yield the pairs a scan with NewIter would, in
// key order, within bounds; breaking out of the loop closes the iterator;
// errors end the sequence (and Iter.Error reports them).
func TestAll(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	for i, key := range []string{"a", "b", "c", "d"} {
		mustPut(t, k, key, key+"v", uint64(i+1))
	}
	mustFlush(t, db)
	mustPut(t, k, "bb", "pending", 5)
	if err := k.Delete(ctx, []byte("c"), 6); err != nil {
		t.Fatal(err)
	}
	collect := func(seq func(func([]byte, []byte) bool)) []string {
		var out []string
		for key, v := range seq {
			out = append(out, string(key)+"="+string(v))
		}
		return out
	}
	if got := collect(k.All(nil)); !slices.Equal(got, []string{"a=av", "b=bv", "bb=pending", "d=dv"}) {
		t.Fatalf("All(nil) = %v", got)
	}
	if got := collect(k.All(&IterOptions{LowerBound: []byte("b"), UpperBound: []byte("d")})); !slices.Equal(got, []string{"b=bv", "bb=pending"}) {
		t.Fatalf("All([b, d)) = %v", got)
	}
	if got := collect(k.All(&IterOptions{Prefix: []byte("b")})); !slices.Equal(got, []string{"b=bv", "bb=pending"}) {
		t.Fatalf("All(prefix b) = %v", got)
	}
	n := 0
	for range k.All(nil) {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("break after one: %d", n)
	}
	if got := collect(k.All(&IterOptions{LowerBound: []byte("z"), UpperBound: []byte("a")})); got != nil {
		t.Fatalf("All with lower > upper = %v, want nothing", got)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	mustPut(t, k, "e", "after", 7)
	sk, err := snap.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(sk.All(nil)); !slices.Equal(got, []string{"a=av", "b=bv", "bb=pending", "d=dv"}) {
		t.Fatalf("snapshot All = %v", got)
	}
	missing, err := snap.KV("none")
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(missing.All(nil)); got != nil {
		t.Fatalf("snapshot All of a keyspace that did not exist = %v", got)
	}
	// Iter.All then Error: the loop that must tell an error from the end.
	it, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(it.All()); len(got) != 5 || it.Error() != nil {
		t.Fatalf("Iter.All = %v, Error %v", got, it.Error())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	if got := collect(k.All(nil)); got != nil {
		t.Fatalf("All after Close = %v", got)
	}
	it2, err := sk.NewIter(nil)
	if err == nil {
		collect(it2.All())
		err = it2.Error()
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot iterator after Close: %v, want ErrClosed", err)
	}
}

// Has answers presence, pending or stored, deleted or range deleted,
// without allocating a copy of the value.
func TestHas(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	big := make([]byte, 64<<10)
	if err := k.Put(ctx, []byte("stored"), big, 1); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "gone", "x", 2)
	mustFlush(t, db)
	if err := k.Put(ctx, []byte("pending"), big, 3); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(ctx, []byte("gone"), 4); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "r1", "x", 5)
	if err := k.DeleteRange(ctx, []byte("r"), []byte("s"), 6); err != nil {
		t.Fatal(err)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	sk, _ := snap.KV("k")
	for _, c := range []struct {
		key  string
		want bool
	}{{"stored", true}, {"pending", true}, {"gone", false}, {"r1", false}, {"never", false}} {
		for name, has := range map[string]func([]byte) (bool, error){"KV": k.Has, "snapshot": sk.Has} {
			got, err := has([]byte(c.key))
			if err != nil || got != c.want {
				t.Errorf("%s Has(%q) = %v, %v; want %v", name, c.key, got, err, c.want)
			}
		}
	}
	for _, key := range []string{"stored", "pending"} {
		if raceEnabled() {
			break // the race detector's instrumentation allocates
		}
		if a := testing.AllocsPerRun(20, func() { _, _ = k.Has([]byte(key)) }); a > 1 {
			t.Errorf("Has(%q) allocates %v times: it copies the value?", key, a)
		}
	}
	if _, err := k.Has(nil); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Has(nil): %v", err)
	}
	none, _ := snap.KV("none")
	if ok, err := none.Has([]byte("a")); ok || err != nil {
		t.Errorf("snapshot Has in a keyspace that did not exist: %v, %v", ok, err)
	}
	if err := db.DropKV(ctx, "k", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Has([]byte("stored")); !errors.Is(err, ErrDropped) {
		t.Errorf("Has on a dropped keyspace: %v", err)
	}
}
