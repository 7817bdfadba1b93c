package failpoint

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
)

func TestHit(t *testing.T) {
	if !Enabled {
		if err := Hit(BitsliceSyncMsync); err != nil {
			t.Fatalf("Hit without the kvbuf_failpoints tag = %v, want nil", err)
		}
		return
	}
	boom := errors.New("boom")
	calls := 0
	disable := Enable(BitsliceSyncMsync, func() error { calls++; return boom })
	if err := Hit(BitsliceSyncMsync); !errors.Is(err, boom) {
		t.Fatalf("Hit = %v, want the callback's error", err)
	}
	if err := Hit(BitsliceGrowHeader); err != nil {
		t.Fatalf("Hit of another point = %v, want nil", err)
	}
	disable()
	if err := Hit(BitsliceSyncMsync); err != nil || calls != 1 {
		t.Fatalf("after disable: Hit = %v, calls = %d; want nil, 1", err, calls)
	}
}

// EnableAll sees every point before the point's own callback; Observe
// receives the sync reports. Without the tag all of it does nothing.
func TestEnableAllAndObserve(t *testing.T) {
	var seen []string
	disable := EnableAll(func(name string) error { seen = append(seen, name); return nil })
	own := errors.New("own")
	disableOwn := Enable(BitsliceSyncDone, func() error { return own })
	err := Hit(BitsliceSyncDone)
	_ = Hit(BitsliceGrowHeader)
	disable()
	disableOwn()
	_ = Hit(BitsliceSyncDone)
	obs := &recorder{}
	stop := Observe(obs)
	FileSynced(nil, 1, 2)
	DirSynced("/d")
	stop()
	DirSynced("/e")
	if !Enabled {
		if err != nil || seen != nil || obs.calls != nil {
			t.Fatalf("without the tag: Hit %v, EnableAll saw %v, the observer %v", err, seen, obs.calls)
		}
		return
	}
	if err != own || !slices.Equal(seen, []string{BitsliceSyncDone, BitsliceGrowHeader}) {
		t.Fatalf("Hit = %v, EnableAll saw %v; want the point's own error and both points", err, seen)
	}
	if !slices.Equal(obs.calls, []string{"file 1 2", "dir /d"}) {
		t.Fatalf("observer got %v", obs.calls)
	}
}

type recorder struct{ calls []string }

func (r *recorder) FileSynced(_ *os.File, off, n int64) {
	r.calls = append(r.calls, fmt.Sprintf("file %d %d", off, n))
}
func (r *recorder) DirSynced(dir string) { r.calls = append(r.calls, "dir "+dir) }
