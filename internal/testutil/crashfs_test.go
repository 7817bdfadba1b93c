package testutil

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrashableMemCloneRacesLock races CrashClone against Lock, Link and
// ReuseForWrite, the three MemFS methods that take pebble's clone lock
// twice; on a bare MemFS of pebble v2.1.7 this loop deadlocks within a few
// thousand rounds at GOMAXPROCS above the cores (the test's timeout then
// fails it).
func TestCrashableMemCloneRacesLock(t *testing.T) {
	m := NewCrashableMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := m.Create("/d/a", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	const rounds = 3000
	var wg sync.WaitGroup
	wg.Go(func() {
		for range rounds {
			m.CrashClone(vfs.CrashCloneCfg{})
		}
	})
	wg.Go(func() {
		for range rounds {
			l, err := m.Lock("/d/LOCK")
			if err != nil {
				t.Error(err)
				return
			}
			l.Close()
		}
	})
	wg.Go(func() {
		for i := range rounds {
			if err := m.Link("/d/a", "/d/b"); err != nil {
				t.Error(err)
				return
			}
			if err := m.Remove("/d/b"); err != nil {
				t.Error(err)
				return
			}
			f, err := m.ReuseForWrite("/d/a", "/d/c", vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Error(i, err)
				return
			}
			f.Close()
			if err := m.Rename("/d/c", "/d/a"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
}
