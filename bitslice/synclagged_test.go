package bitslice

import (
	"errors"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// SyncLagged writes the header before its one fdatasync, so the header
// records the generation staged now and only the watermark staged when the
// previous successful sync began (rule L1 of File.SyncLagged): its changes
// are durable before this header can be. A Sync records the staged
// watermark again (msync first).
func TestSyncLaggedHeaderLags(t *testing.T) {
	f := create(t, 1000)
	seq := f.Info().Seq
	if err := f.SyncLagged(); err != nil {
		t.Fatal(err)
	}
	if f.Info().Seq != seq {
		t.Fatal("SyncLagged with nothing new wrote a header")
	}
	for k := uint64(1); k <= 4; k++ {
		if err := f.Set(k, true); err != nil {
			t.Fatal(err)
		}
		f.SetWatermark(k)
		f.SetGen(10 + k)
		if err := f.SyncLagged(); err != nil {
			t.Fatal(err)
		}
		// Sync k began with watermark k staged, sync k-1 with k-1.
		if f.Watermark() != k-1 || f.Gen() != 10+k || f.Info().Seq != seq+k {
			t.Fatalf("SyncLagged %d: watermark %d gen %d seq %d; want %d, %d, %d", k, f.Watermark(), f.Gen(), f.Info().Seq, k-1, 10+k, seq+k)
		}
	}
	// Nothing new staged: the header catches up with the last watermark,
	// whose changes the previous sync made durable.
	if err := f.SyncLagged(); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 4 || f.Gen() != 14 {
		t.Fatalf("SyncLagged with nothing staged: watermark %d gen %d; want 4, 14", f.Watermark(), f.Gen())
	}
	seq = f.Info().Seq
	if err := f.SyncLagged(); err != nil {
		t.Fatal(err)
	}
	if f.Info().Seq != seq {
		t.Fatal("SyncLagged with the header up to date wrote a header")
	}
	if err := f.Set(900, true); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(5)
	if err := f.SyncLagged(); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 4 {
		t.Fatalf("SyncLagged after watermark 5: header watermark %d, want 4", f.Watermark())
	}
	g := reopen(t, f)
	if g.Watermark() != 4 || g.Gen() != 14 || !g.Get(900) {
		t.Fatalf("reopened: watermark %d gen %d bit 900 %v; want 4, 14, true", g.Watermark(), g.Gen(), g.Get(900))
	}
	// The watermark 5 staged before Close was not recorded; one staged
	// again is, by Sync (msync, then the header) or the next SyncLagged
	// but one.
	g.SetWatermark(5)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if g.Watermark() != 5 {
		t.Fatalf("Sync: watermark %d, want 5", g.Watermark())
	}
}

// A closed file's SyncLagged fails with kverr.ErrClosed.
func TestSyncLaggedClosed(t *testing.T) {
	f := create(t, 10)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncLagged(); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("SyncLagged after Close: %v, want ErrClosed", err)
	}
}
