package raftkv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
)

// hashTree describes everything under root but LOCK files (whose
// modification times pebble and the node touch): equal hashes mean nothing
// was changed.
func hashTree(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.Name() == "LOCK" {
			return nil
		}
		fmt.Fprintf(h, "%s %v\n", rel, d.Type())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%x\n", sha256.Sum256(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// singleNode opens a one-node cluster in dir, writes a key and closes it.
func singleNode(t *testing.T, dir string, tune func(o *Options)) {
	t.Helper()
	o := crashOptions(dir)
	if tune != nil {
		tune(o)
	}
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leadership", n.IsLeader)
	if err := n.CreateKeyspace(bg, "ks"); err != nil {
		t.Fatal(err)
	}
	if err := n.Put(bg, "ks", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBadOptions(t *testing.T) {
	dir := t.TempDir()
	peers := map[uint64]string{1: "127.0.0.1:7001"}
	for name, o := range map[string]*Options{
		"nil":               nil,
		"id 0":              {Peers: peers, Dir: dir},
		"no dir":            {ID: 1, Peers: peers},
		"no peers":          {ID: 1, Dir: dir},
		"peer id 0":         {ID: 1, Dir: dir, Peers: map[uint64]string{0: "127.0.0.1:1", 1: "127.0.0.1:2"}},
		"bad address":       {ID: 1, Dir: dir, Peers: map[uint64]string{1: "localhost"}},
		"heartbeat":         {ID: 1, Dir: dir, Peers: peers, HeartbeatTicks: 10, ElectionTicks: 10},
		"negative tick":     {ID: 1, Dir: dir, Peers: peers, TickInterval: -1},
		"bad engine option": {ID: 1, Dir: dir, Peers: peers, Engine: &kvbuf.Options{PipelineDepth: 1000}},
		"not in peers":      {ID: 2, Dir: dir, Peers: peers},
	} {
		if _, err := Open(o); !errors.Is(err, kvbuf.ErrBadOptions) {
			t.Errorf("%s: %v, want kvbuf.ErrBadOptions", name, err)
		}
	}
}

// A node never opens another cluster's or another node's data directory,
// and leaves it as it was.
func TestOpenForeignDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	singleNode(t, dir, nil)
	before := hashTree(t, dir)
	for name, tune := range map[string]func(o *Options){
		"other token": func(o *Options) { o.ClusterToken = "another" },
		"other id": func(o *Options) {
			o.ID = 2
			o.Peers = map[uint64]string{2: "127.0.0.1:1"}
		},
	} {
		o := crashOptions(dir)
		tune(o)
		_, err := Open(o)
		if !errors.Is(err, ErrClusterMismatch) {
			t.Errorf("%s: %v, want ErrClusterMismatch", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if hashTree(t, dir) != before {
		t.Fatal("a refused Open changed the data directory")
	}
	// Still opens with its own identity, with its data.
	n, err := Open(crashOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if v, err := n.Get(bg, "ks", []byte("k"), &ReadOptions{Stale: true}); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := Open(crashOptions(dir)); !errors.Is(err, kvbuf.ErrLocked) {
		t.Fatalf("a second Open of an open directory: %v, want kvbuf.ErrLocked", err)
	}
}

func TestOpenInconsistentDataDir(t *testing.T) {
	t.Run("engine without log", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		if err := os.RemoveAll(filepath.Join(dir, logDir)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(crashOptions(dir)); !errors.Is(err, ErrDataDir) {
			t.Fatalf("Open: %v, want ErrDataDir", err)
		}
	})
	t.Run("log names a missing engine", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.db.Set(keyEngine, []byte(engineDirName(99)), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		ls.close()
		if _, err := Open(crashOptions(dir)); !errors.Is(err, ErrDataDir) {
			t.Fatalf("Open: %v, want ErrDataDir", err)
		}
	})
	t.Run("engine behind the compacted log", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
		if err != nil {
			t.Fatal(err)
		}
		_, last := ls.bounds()
		// A log compacted past the engine (as if the engine lost data).
		if err := ls.db.Set(keyTrunc, append(make([]byte, 0, 16), le64(last+5)...), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		ls.close()
		if _, err := Open(crashOptions(dir)); err == nil {
			t.Fatal("Open of a log whose base is past the engine succeeded")
		}
	})
	t.Run("corrupt identity", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		if err := os.WriteFile(filepath.Join(dir, identityFile), []byte("kvraft data directory\ncluster zz\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(crashOptions(dir)); !errors.Is(err, ErrCorruptLog) {
			t.Errorf("Open with a damaged identity: %v, want ErrCorruptLog", err)
		}
		if err := os.Remove(filepath.Join(dir, identityFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(crashOptions(dir)); !errors.Is(err, ErrDataDir) {
			t.Errorf("Open of a log without identity: %v, want ErrDataDir", err)
		}
	})
	t.Run("corrupt records", func(t *testing.T) {
		for _, key := range [][]byte{keyHardState, keyTrunc} {
			dir := filepath.Join(t.TempDir(), "node")
			singleNode(t, dir, nil)
			ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.db.Set(key, []byte{0xff, 1, 2}, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			ls.close()
			if _, err := Open(crashOptions(dir)); !errors.Is(err, ErrCorruptLog) {
				t.Errorf("Open with a damaged %q record: %v, want ErrCorruptLog", key, err)
			}
		}
	})
	t.Run("stale engines removed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		for _, name := range []string{engineDirName(7), engineDirName(9) + stagingSuffix} {
			if err := os.MkdirAll(filepath.Join(dir, name, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		n, err := Open(crashOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		for _, name := range []string{engineDirName(7), engineDirName(9) + stagingSuffix} {
			if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s left after Open: %v", name, err)
			}
		}
	})
}

func le64(v uint64) []byte {
	b := make([]byte, 16)
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
	for i := range 8 {
		b[8+i] = 1 // term
	}
	return b
}

// Restore refuses what cannot make a new cluster's node, and leaves no
// directory behind.
func TestRestoreBadInput(t *testing.T) {
	peers := map[uint64]string{1: "127.0.0.1:1"}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		o      *Options
		stream string
		want   error
	}{
		"join":           {&Options{ID: 1, Peers: peers, Join: true}, "", kvbuf.ErrBadOptions},
		"not in peers":   {&Options{ID: 2, Peers: peers}, "", kvbuf.ErrBadOptions},
		"not empty":      {&Options{ID: 1, Peers: peers, Dir: full}, "", fs.ErrExist},
		"not a snapshot": {&Options{ID: 1, Peers: peers}, "not a snapshot stream", kvbuf.ErrBadStream},
		"empty stream":   {&Options{ID: 1, Peers: peers}, "", kvbuf.ErrBadStream},
	} {
		if c.o.Dir == "" {
			c.o.Dir = filepath.Join(t.TempDir(), "node")
		}
		_, err := Restore(bg, c.o, strings.NewReader(c.stream))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if c.o.Dir != full {
			if _, err := os.Stat(c.o.Dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: the directory is left: %v", name, err)
			}
		}
	}
}
