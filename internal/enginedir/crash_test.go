package enginedir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestCrashedInitialisationStates builds, on disk, every state a crash can
// leave while a directory is being initialised (by this version's protocol,
// step by step, and by earlier versions'), and checks that Open finishes
// the initialisation: it opens Fresh, removes the leftovers, and after the
// store is made and MarkReady, the directory is exactly a ready engine.
func TestCrashedInitialisationStates(t *testing.T) {
	const tmpID = "0123456789abcdef"
	lockTmp := lockTempPrefix + tmpID
	manTmp := manifestTempPrefix + tmpID
	// file is created with content, or as a hard link to the file linkTo.
	type file struct{ name, content, linkTo string }
	w := func(name, content string) file { return file{name: name, content: content} }
	ln := func(name, to string) file { return file{name: name, linkTo: to} }
	cases := []struct {
		name  string
		files []file   // created in this order
		dirs  []string // created before the files
		// keepLock: the LOCK found is kept as it is (an earlier version's
		// empty one, say); otherwise it holds lockText afterwards.
		keepLock bool
		ready    bool // the state is a finished engine: Open is not Fresh
	}{
		// This version's protocol, in order.
		{name: "1 directory created, nothing in it"},
		{name: "2 temporary LOCK created, empty", files: []file{w(lockTmp, "")}},
		{name: "3 temporary LOCK written", files: []file{w(lockTmp, lockText)}},
		{name: "4 LOCK published by link, temporary name not yet removed", files: []file{w(lockTmp, lockText), ln(LockName, lockTmp)}},
		{name: "5 LOCK published", files: []file{w(LockName, lockText)}},
		{name: "5b LOCK published, another opener's temporary LOCK left", files: []file{w(LockName, lockText), w(lockTempPrefix+"fedcba9876543210", "")}},
		{name: "6 temporary manifest created, empty", files: []file{w(LockName, lockText), w(manTmp, "")}},
		{name: "7 temporary manifest torn", files: []file{w(LockName, lockText), w(manTmp, manifestInit[:10])}},
		{name: "8 temporary manifest written, not renamed", files: []file{w(LockName, lockText), w(manTmp, manifestInit)}},
		{name: "9 initialising manifest", files: []file{w(LockName, lockText), w(ManifestName, manifestInit)}},
		{name: "10 bits directory made", dirs: []string{BitsDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestInit)}},
		{name: "11 store partly made", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestInit), w(filepath.Join(StoreDir, "000002.log"), "")}},
		{name: "12 store made", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestInit), w(filepath.Join(StoreDir, "MANIFEST-000001"), "pebble")}},
		{name: "13 ready manifest torn in its temporary file", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestInit), w(manTmp, manifestReady[:5])}},
		{name: "14 ready manifest written, not renamed", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestInit), w(manTmp, manifestReady)}},
		{name: "15 ready manifest renamed (done)", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestReady)}, ready: true},
		{name: "15b done, a temporary manifest of a later crash left", dirs: []string{BitsDir, StoreDir}, files: []file{w(LockName, lockText), w(ManifestName, manifestReady), w(manTmp, manifestReady)}, ready: true},

		// Earlier versions wrote the manifest (through KVBUF.tmp) before
		// taking the lock, and left LOCK empty.
		{name: "old 1 temporary manifest only", files: []file{w(legacyManifestTemp, manifestInit)}},
		{name: "old 2 temporary manifest torn", files: []file{w(legacyManifestTemp, "kvbuf")}},
		{name: "old 3 initialising manifest, no LOCK", files: []file{w(ManifestName, manifestInit)}},
		{name: "old 4 initialising manifest and bits, no LOCK", dirs: []string{BitsDir}, files: []file{w(ManifestName, manifestInit)}},
		{name: "old 5 initialising manifest and empty LOCK", dirs: []string{BitsDir}, files: []file{w(ManifestName, manifestInit), w(LockName, "")}, keepLock: true},
		{name: "old 6 initialising manifest, store, temporary ready manifest", dirs: []string{BitsDir, StoreDir}, files: []file{w(ManifestName, manifestInit), w(LockName, ""), w(legacyManifestTemp, manifestReady)}, keepLock: true},
		{name: "old 7 ready engine", dirs: []string{BitsDir, StoreDir}, files: []file{w(ManifestName, manifestReady), w(LockName, "")}, keepLock: true, ready: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range tc.dirs {
				mkdir(t, filepath.Join(dir, d))
			}
			for _, f := range tc.files {
				if f.linkTo != "" {
					if err := os.Link(filepath.Join(dir, f.linkTo), filepath.Join(dir, f.name)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeFile(t, filepath.Join(dir, f.name), f.content)
			}
			lockBefore, _ := os.ReadFile(filepath.Join(dir, LockName))

			// A tool sees an engine whose initialisation was interrupted.
			info, err := Describe(dir)
			switch {
			case len(tc.files) == 0:
				checkIs(t, err, kverr.ErrNotEngine) // an empty directory is no engine yet
			case err != nil:
				t.Fatalf("Describe: %v", err)
			case tc.ready && info.State != Ready, !tc.ready && info.State != Initialising:
				t.Fatalf("Describe: state %v", info.State)
			}

			d := openT(t, dir)
			if d.Fresh() == tc.ready {
				t.Fatalf("Fresh = %v for this state", d.Fresh())
			}
			want := []string{ManifestName, LockName, BitsDir}
			if _, err := os.Stat(d.StorePath()); err == nil {
				want = append(want, StoreDir)
			}
			wantEntries(t, dir, want...) // the leftovers are gone
			if err := finishInit(d); err != nil {
				t.Fatal(err)
			}
			closeT(t, d)
			wantEntries(t, dir, ManifestName, LockName, BitsDir, StoreDir)
			if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestReady {
				t.Fatalf("manifest %q after the initialisation was finished", got)
			}
			lock := readString(t, filepath.Join(dir, LockName))
			if tc.keepLock && lock != string(lockBefore) || !tc.keepLock && lock != lockText {
				t.Fatalf("LOCK holds %q (before: %q)", lock, lockBefore)
			}
			d = openT(t, dir)
			if d.Fresh() {
				t.Fatal("Fresh after the initialisation was finished")
			}
			closeT(t, d)
		})
	}
}
