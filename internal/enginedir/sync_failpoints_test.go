//go:build kvbuf_failpoints

package enginedir

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

// syncLog records the directories fsynced.
type syncLog struct {
	mu   sync.Mutex
	dirs []string
}

func (l *syncLog) FileSynced(*os.File, int64, int64) {}
func (l *syncLog) DirSynced(dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dirs = append(l.dirs, filepath.Clean(dir))
}

// TestOpenSyncsEveryDirectoryMade: Open of a path whose parents do not
// exist syncs the parent of every directory it makes, up to the closest
// one that existed, so that a power cut cannot drop the engine with an
// unsynced ancestor (issue 30).
func TestOpenSyncsEveryDirectoryMade(t *testing.T) {
	root := t.TempDir()
	l := &syncLog{}
	defer failpoint.Observe(l)()
	path := filepath.Join(root, "a", "b", "engine")
	d, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, want := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if !slices.Contains(l.dirs, want) {
			t.Errorf("Open of %s made %s and never synced it in its parent (synced: %v)", path, want, l.dirs)
		}
	}
}
