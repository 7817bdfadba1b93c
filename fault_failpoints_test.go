//go:build kvbuf_failpoints

package kvbuf

// Fault tests through the bitslice failpoints (go test -tags
// kvbuf_failpoints): each injected error fails the flush, which reports it;
// the watermark stays; every pending change stays readable, including
// writes made while the fault lasts; and the first flush after the fault is
// gone makes everything durable (checked after a reopen).

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/flush"
	"github.com/kvbuf/kvbuf/internal/failpoint"
)

func TestFaultBitsliceFailpoints(t *testing.T) {
	cases := []struct {
		point string
		fail  func() error
		want  error
		grow  bool // the failing flush must grow the file to reach the point
	}{
		{failpoint.BitsliceSyncMsync, func() error { return syscall.EIO }, syscall.EIO, false},
		{failpoint.BitsliceSyncHeader, func() error { return syscall.EIO }, syscall.EIO, false},
		{failpoint.BitsliceGrowAllocate, func() error { return syscall.ENOSPC }, syscall.ENOSPC, true},
		{failpoint.BitsliceGrowHeader, func() error { return syscall.EIO }, syscall.EIO, true},
		{failpoint.BitsliceSyncMsync, func() error { panic("injected panic") }, flush.ErrPanicked, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%v", c.point, c.want), func(t *testing.T) {
			faultRound(t, c.point, c.fail, c.want, c.grow)
		})
	}
}

func faultRound(t *testing.T, point string, fail func() error, want error, grow bool) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	op := uint64(0)
	type bit struct {
		i uint64
		v bool
	}
	kv := map[string]string{}
	var bits []bit
	write := func(n int, base uint64) {
		for i := range n {
			op++
			key, val := fmt.Sprintf("k%d", op%37), fmt.Sprintf("v%d", op)
			if err := k.Put(ctx, []byte(key), []byte(val), op); err != nil {
				t.Fatal(err)
			}
			kv[key] = val
			op++
			bt := bit{base + uint64(i)*131%4096, op%3 != 0}
			if err := b.Set(ctx, bt.i, bt.v, op); err != nil {
				t.Fatal(err)
			}
			bits = append(bits, bt)
		}
	}
	check := func(stage string, b *Bits, k *KV) {
		t.Helper()
		last := map[uint64]bool{}
		for _, bt := range bits {
			last[bt.i] = bt.v
		}
		for i, v := range last {
			if got, err := b.Get(i); err != nil || got != v {
				t.Fatalf("%s: bit %d = %v, %v; want %v", stage, i, got, err, v)
			}
		}
		for key, val := range kv {
			wantGet(t, k, key, val)
		}
	}
	write(50, 0)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	good := db.Watermark()

	base := uint64(0)
	if grow {
		base = 1 << 20 // past the file's end: the flush must Grow
	}
	disable := failpoint.Enable(point, fail)
	write(50, base)
	for attempt := range 3 {
		err := db.Flush(ctx)
		if !errors.Is(err, want) {
			disable()
			t.Fatalf("flush %d with %s failing = %v, want %v", attempt, point, err, want)
		}
		if wm := db.Watermark(); wm != good {
			disable()
			t.Fatalf("watermark moved to %d by a failed flush (was %d)", wm, good)
		}
		check(fmt.Sprintf("after failed flush %d", attempt), b, k)
		write(10, base+uint64(attempt)*7) // writes during the fault join the retry
	}
	disable()
	if err := db.Flush(ctx); err != nil {
		t.Fatalf("flush after the fault is gone: %v", err)
	}
	if wm := db.Watermark(); wm != op {
		t.Fatalf("watermark %d after recovery, want %d", wm, op)
	}
	check("after recovery", b, k)
	if st := db.Stats(); st.Failures < 3 {
		t.Fatalf("Stats.Failures = %d, want >= 3", st.Failures)
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	check("after reopen", mustBits(t, db, "b"), mustKV(t, db, "k"))
}
