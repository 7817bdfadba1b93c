package failpoint

import (
	"errors"
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
