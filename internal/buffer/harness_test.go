package buffer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// kvRig drives one KV overlay over a real store the way the engine does:
// writers under the shared side of a barrier, Freeze under its exclusive
// side, generations written (AddTo, Commit, Wait) and released in order.
type kvRig struct {
	t     testing.TB
	st    *storage.Store
	kv    *KV
	acct  Account
	bar   sync.RWMutex
	gen   uint64
	queue []*KVGen // frozen, not released, oldest first
}

func newKVRig(t testing.TB, opts *Options) *kvRig {
	t.Helper()
	st, err := storage.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &kvRig{t: t, st: st}
	r.kv, err = NewKV(st, 1, &r.acct, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *kvRig) put(k, v string) {
	r.t.Helper()
	r.bar.RLock()
	defer r.bar.RUnlock()
	if err := r.kv.Put([]byte(k), []byte(v)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *kvRig) del(k string) {
	r.t.Helper()
	r.bar.RLock()
	defer r.bar.RUnlock()
	if err := r.kv.Delete([]byte(k)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *kvRig) delRange(lo, hi *string) {
	r.t.Helper()
	r.bar.RLock()
	defer r.bar.RUnlock()
	if err := r.kv.DeleteRange(bptr(lo), bptr(hi)); err != nil {
		r.t.Fatal(err)
	}
}

func bptr(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// freeze freezes a generation and queues it; it reports whether anything
// was frozen.
func (r *kvRig) freeze() bool {
	r.bar.Lock()
	defer r.bar.Unlock()
	r.gen++
	g := r.kv.Freeze(r.gen)
	if g == nil {
		return false
	}
	r.queue = append(r.queue, g)
	return true
}

var errInjected = errors.New("injected write failure")

// write writes the oldest queued generation; with fail it builds the batch
// and drops it instead of committing (a failed flush). It reports whether a
// generation was written.
func (r *kvRig) write(fail bool) bool {
	r.t.Helper()
	if len(r.queue) == 0 {
		return false
	}
	b := r.st.NewBatch()
	if err := r.queue[0].AddTo(context.Background(), b); err != nil {
		r.t.Fatal(err)
	}
	if fail {
		return false
	}
	c, err := r.st.Commit(b)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		r.t.Fatal(err)
	}
	return true
}

// release releases the oldest queued generation (which must be written).
func (r *kvRig) release() {
	g := r.queue[0]
	r.queue = r.queue[1:]
	g.Release()
}

// flush freezes, writes and releases everything.
func (r *kvRig) flush() {
	r.freeze()
	for len(r.queue) > 0 {
		r.write(false)
		r.release()
	}
}

// kvModel is the sequential model of one keyspace.
type kvModel map[string]string

func (m kvModel) deleteRange(lo, hi *string) {
	for k := range m {
		if (lo == nil || k >= *lo) && (hi == nil || k < *hi) {
			delete(m, k)
		}
	}
}

func (m kvModel) keysIn(lo, hi *string) []string {
	var ks []string
	for k := range m {
		if (lo == nil || k >= *lo) && (hi == nil || k < *hi) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

func (m kvModel) clone() kvModel {
	c := kvModel{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

// checkGet compares Get of every key of universe with the model.
func checkGet(t testing.TB, get func([]byte) ([]byte, error), m kvModel, universe []string, where string) {
	t.Helper()
	for _, k := range universe {
		v, err := get([]byte(k))
		want, ok := m[k]
		switch {
		case ok && (err != nil || string(v) != want):
			t.Fatalf("%s: Get(%q) = %q, %v; want %q", where, k, v, err, want)
		case !ok && !errors.Is(err, kverr.ErrNotFound):
			t.Fatalf("%s: Get(%q) = %q, %v; want ErrNotFound", where, k, v, err)
		}
	}
}

// scanAll runs a forward and a backward scan within [lo, hi) and compares
// both with the model.
func checkScan(t testing.TB, newIter func(lo, hi []byte) (*Iter, error), m kvModel, lo, hi *string, where string) {
	t.Helper()
	it, err := newIter(bptr(lo), bptr(hi))
	if err != nil {
		t.Fatalf("%s: NewIter: %v", where, err)
	}
	defer it.Close()
	want := m.keysIn(lo, hi)
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatalf("%s: scan: %v", where, err)
	}
	wantKV := make([]string, len(want))
	for i, k := range want {
		wantKV[i] = k + "=" + m[k]
	}
	if !slices.Equal(got, wantKV) {
		t.Fatalf("%s: forward scan [%s, %s)\n got %v\nwant %v", where, show(lo), show(hi), got, wantKV)
	}
	got = got[:0]
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	slices.Reverse(wantKV)
	if !slices.Equal(got, wantKV) {
		t.Fatalf("%s: backward scan [%s, %s)\n got %v\nwant %v", where, show(lo), show(hi), got, wantKV)
	}
}

func show(s *string) string {
	if s == nil {
		return "open"
	}
	return fmt.Sprintf("%q", *s)
}

func keyName(i int) string { return fmt.Sprintf("k%03d", i) }

func joinKeys(ks []string) string { return strings.Join(ks, ",") }
