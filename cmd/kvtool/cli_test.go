package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bench"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// TestGenerateEngineFixture rebuilds testdata/engine with -update: a fixed
// seed loaded by the load command, flushed. It runs before TestGolden
// (file order), so -update refreshes the fixture and then its goldens.
func TestGenerateEngineFixture(t *testing.T) {
	if !*update {
		t.Skip("run with -update to regenerate testdata/engine")
	}
	if err := os.RemoveAll(engineFixture); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"load", "-n", "400", "-seed", "7", "-keyspace", "users", "-bits", "live", engineFixture}, &stdout, &stderr); code != 0 {
		t.Fatalf("load: exit %d: %s", code, stderr.String())
	}
}

// runCLI runs kvtool in-process and returns exit code, stdout, stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// checkError asserts the error contract: exit 1, nothing on stdout, one
// line on stderr, no panic or stack trace, one prefix (kvtool's: no
// "kvbuf: " in the line), and the line contains want.
func checkError(t *testing.T, code int, stdout, stderr, want string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit %d, want 1 (stderr %q)", code, stderr)
	}
	if stdout != "" || strings.Count(stderr, "\n") != 1 {
		t.Errorf("want one stderr line and no stdout; got stdout %q stderr %q", stdout, stderr)
	}
	if !strings.HasPrefix(stderr, "kvtool ") || strings.Contains(stderr, "kvbuf: ") {
		t.Errorf("stderr %q: want kvtool's prefix alone", stderr)
	}
	for _, bad := range []string{"panic", "goroutine ", ".go:"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("stderr looks like a crash (%q): %s", bad, stderr)
		}
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not mention %q", stderr, want)
	}
}

// copyDir copies the engine fixture into a fresh temporary directory, so
// tests that write or damage it leave testdata alone.
func copyFixture(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "engine")
	err := filepath.WalkDir(engineFixture, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(engineFixture, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func inspectJSONOf(t *testing.T, dir string) engineJSON {
	t.Helper()
	code, out, errOut := runCLI(t, "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("inspect %s: exit %d: %s", dir, code, errOut)
	}
	var e engineJSON
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("inspect --json output: %v\n%s", err, out)
	}
	return e
}

// TestInspectNeverWrites checks that inspect leaves every file as it was.
// The LOCK files are excluded: pebble's read-only open locks the store
// through its LOCK file, which updates its modification time (it stays
// empty).
func TestInspectNeverWrites(t *testing.T) {
	before := snapshot(t, engineFixture)
	for range 2 {
		if code, _, errOut := runCLI(t, "inspect", engineFixture); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	}
	if after := snapshot(t, engineFixture); !slices.Equal(before, after) {
		t.Errorf("inspect changed the fixture:\nbefore %v\nafter  %v", before, after)
	}
}

// snapshot lists every file under dir with its size and modification time.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.Name() == enginedir.LockName {
			out = append(out, fmt.Sprint(path, " ", fi.Size()))
			return nil
		}
		out = append(out, fmt.Sprint(path, " ", fi.ModTime(), " ", fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadFlushInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e")
	code, out, errOut := runCLI(t, "load", "-n", "300", "-seed", "3", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("load: exit %d, stderr %q (want no progress bar: stderr is not a terminal)", code, errOut)
	}
	if !strings.Contains(out, "loaded 300 changes") || !strings.Contains(out, "watermark 300") {
		t.Errorf("load output: %s", out)
	}
	// A second load continues the op numbers from the watermark.
	code, out, errOut = runCLI(t, "load", "--progress", "-n", "200", dir, "-keyspace", "other")
	if code != 0 || !strings.Contains(out, "ops 301..500") || !strings.Contains(errOut, "100%") {
		t.Errorf("second load: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	e := inspectJSONOf(t, dir)
	if e.Locked || e.Watermark == nil || *e.Watermark != 500 || e.Store == nil || len(e.Bitslices) != 1 {
		t.Fatalf("inspect after load: %+v", e)
	}
	if b := e.Bitslices[0]; b.Name != "load" || b.Watermark != 500 || b.SetBits == 0 || b.Bits == 0 {
		t.Errorf("bitslice: %+v", b)
	}
	if e.Store.EstimatedKeys == 0 || e.TotalSize < int64(e.Store.DiskUsage) {
		t.Errorf("store: %+v, total %d", e.Store, e.TotalSize)
	}
	code, out, errOut = runCLI(t, "flush", "--json", dir)
	if code != 0 {
		t.Fatalf("flush: exit %d: %s", code, errOut)
	}
	var f flushJSON
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatal(err)
	}
	// Nothing is pending in a freshly opened engine: no generation.
	if f.Watermark != 500 || f.WatermarkBefore != 500 || f.Before == nil || f.After == nil ||
		f.Generations != 0 || f.Failures != 0 ||
		!slices.Equal(f.Keyspaces, []string{"load", "other"}) || !slices.Equal(f.Bitslices, []string{"load"}) {
		t.Errorf("flush: %+v", f)
	}
	code, out, _ = runCLI(t, "flush", dir)
	for _, want := range []string{
		"generations: 0 (0 writes, 0 failures)\n",
		"keyspaces:   2 (load, other)\n",
		"bitslices:   1 (load)\n",
		"watermark:   500 -> 500\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("flush text: exit %d, no %q in\n%s", code, want, out)
		}
	}
}

// TestFlushFinishesDrop: a keyspace drop whose catalog change was not
// durable (as after a crash) is finished by flush, in one generation.
func TestFlushFinishesDrop(t *testing.T) {
	dir := copyFixture(t)
	setCatalogMeta(t, dir, "users 1\n@dropped 2\n@next 3\n")
	code, out, errOut := runCLI(t, "flush", "--json", dir)
	if code != 0 {
		t.Fatalf("flush: exit %d: %s", code, errOut)
	}
	var f flushJSON
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatal(err)
	}
	if f.Generations != 1 || f.GenerationWrites != 1 || f.Failures != 0 || f.Watermark != 400 {
		t.Errorf("flush: %+v", f)
	}
	if e := inspectJSONOf(t, dir); len(e.DroppedKeyspaces) != 0 {
		t.Errorf("dropped keyspaces after flush: %v", e.DroppedKeyspaces)
	}
}

// engineContents reads every key of every keyspace and every set bit of
// every bitslice of the engine in dir.
func engineContents(t *testing.T, dir string) []string {
	t.Helper()
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, name := range db.Keyspaces() {
		kv, err := db.KV(name)
		if err != nil {
			t.Fatal(err)
		}
		it, err := kv.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			out = append(out, fmt.Sprintf("%s %x=%x", name, it.Key(), it.Value()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range db.Bitslices() {
		b, err := db.Bits(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.Ones(0) {
			out = append(out, fmt.Sprintf("%s %d", name, i))
		}
	}
	return out
}

// TestLoadMakesFixture: loading the fixture's seed again makes the same
// data as testdata/engine, so the fixture need not be regenerated while the
// on-disk format and load's random stream stay the same.
func TestLoadMakesFixture(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e")
	if code, _, errOut := runCLI(t, "load", "-n", "400", "-seed", "7", "-keyspace", "users", "-bits", "live", dir); code != 0 {
		t.Fatalf("load: exit %d: %s", code, errOut)
	}
	got, want := engineContents(t, dir), engineContents(t, copyFixture(t))
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("load -n 400 -seed 7 made %d entries, the fixture has %d (or they differ): regenerate it with -update if the change is intended", len(got), len(want))
	}
}

// TestLoadRanges: --ranges adds range deletes and bit ranges, counted in
// the summary, and the same seed makes the same engine.
func TestLoadRanges(t *testing.T) {
	var contents [][]string
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("e", i))
		code, out, errOut := runCLI(t, "load", "-n", "2000", "-seed", "5", "--ranges", dir)
		if code != 0 {
			t.Fatalf("load: exit %d: %s", code, errOut)
		}
		var dr, sr int
		if _, err := fmt.Sscanf(out[strings.Index(out, "ranges:"):], "ranges: %d range deletes, %d bit ranges", &dr, &sr); err != nil || dr == 0 || sr == 0 {
			t.Errorf("load --ranges output (%v):\n%s", err, out)
		}
		if !strings.Contains(out, "loaded 2000 changes") || !strings.Contains(out, "ops 1..2000, flushed; watermark 2000") {
			t.Errorf("load --ranges output:\n%s", out)
		}
		contents = append(contents, engineContents(t, dir))
	}
	if !slices.Equal(contents[0], contents[1]) {
		t.Error("two loads with the same seed made different engines")
	}
}

func TestLockedEngine(t *testing.T) {
	dir := copyFixture(t)
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Read-only inspection still describes the bitslices; the store is
	// pebble-locked by the engine, and inspect says so.
	code, out, errOut := runCLI(t, "inspect", dir)
	if code != 0 || !strings.Contains(out, "locked:         yes") || !strings.Contains(out, "live:") {
		t.Errorf("inspect locked: exit %d\n%s%s", code, out, errOut)
	}
	e := inspectJSONOf(t, dir)
	if !e.Locked || e.Store != nil || e.Watermark != nil || len(e.Bitslices) != 1 {
		t.Errorf("inspect --json locked: %+v", e)
	}
	// Each command says what holds the directory and what to do instead.
	code, out, errOut = runCLI(t, "flush", dir)
	checkError(t, code, out, errOut, "open by a running engine (another process, or this one, holds its lock; a running engine flushes itself")
	code, out, errOut = runCLI(t, "load", "-n", "3", dir)
	checkError(t, code, out, errOut, "open by a running engine (another process, or this one, holds its lock; load into it from that process")
	code, out, errOut = runCLI(t, "checkpoint", dir, filepath.Join(t.TempDir(), "cp"))
	checkError(t, code, out, errOut, "open by a running engine (another process, or this one, holds its lock; a running engine checkpoints itself")
}

// TestCorruptEngine damages a copy of the fixture in several ways: every
// command reports one line and exit 1, never a stack trace.
func TestCorruptEngine(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"foreign-manifest", func(t *testing.T, dir string) {
			// Next to store/ and bits/: a damaged engine, not a foreign
			// directory (issue 20).
			write(t, filepath.Join(dir, enginedir.ManifestName), "hello\n")
		}, "but its KVBUF manifest is damaged (6 bytes: \"hello\\n\"): corrupt engine directory"},
		{"interrupted-init", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, enginedir.ManifestName), "kvbuf engine directory\nformat 1\ninitialising\n")
		}, "engine initialisation was interrupted"},
		{"future-manifest", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, enginedir.ManifestName), "kvbuf engine directory\nformat 9\n")
		}, "unsupported or damaged manifest"},
		{"truncated-bitslice", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, enginedir.BitsDir, "live"+enginedir.BitsExt), 100); err != nil {
				t.Fatal(err)
			}
		}, "live.bits"},
		{"garbage-store-manifest", func(t *testing.T, dir string) {
			ms, _ := filepath.Glob(filepath.Join(dir, enginedir.StoreDir, "MANIFEST-*"))
			if len(ms) == 0 {
				t.Fatal("fixture has no pebble MANIFEST")
			}
			for _, m := range ms {
				write(t, m, strings.Repeat("\xde\xad\xbe\xef", 300))
			}
		}, "store"},
		{"corrupt-sstable", func(t *testing.T, dir string) {
			ts, _ := filepath.Glob(filepath.Join(dir, enginedir.StoreDir, "*.sst"))
			if len(ts) == 0 {
				t.Fatal("fixture has no sstable")
			}
			b, err := os.ReadFile(ts[0])
			if err != nil {
				t.Fatal(err)
			}
			for i := 100; i < len(b)/2; i++ {
				b[i] ^= 0x5a
			}
			write(t, ts[0], string(b))
		}, "corrupt store"},
		{"missing-store", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, enginedir.StoreDir)); err != nil {
				t.Fatal(err)
			}
		}, "store"},
		{"store-is-file", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, enginedir.StoreDir)); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, enginedir.StoreDir), "x")
		}, "store"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t)
			tc.damage(t, dir)
			for _, args := range [][]string{{"inspect", dir}, {"inspect", "--json", dir}, {"flush", dir}} {
				code, out, errOut := runCLI(t, args...)
				checkError(t, code, out, errOut, tc.want)
			}
		})
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSelectWorkloads(t *testing.T) {
	cases := []struct {
		pattern string
		want    []string
	}{
		{"W1/lookup-with-*", []string{"W1/lookup-with-pending-changes", "W1/lookup-with-pending-changes-1-snapshot", "W1/lookup-with-pending-changes-16-snapshots"}},
		{"W4", []string{"W4/flush-g1", "W4/flush-g4", "W4/flush-g16", "W4/flush-g64", "W4/flush-g16-think1ms"}},
		{"W2/get-pending-*", []string{"W2/get-pending-hit", "W2/get-pending-tombstone", "W2/get-pending-hit-1-snapshot", "W2/get-pending-hit-16-snapshots"}},
		{"g(1|4)$", []string{"W4/flush-g1", "W4/flush-g4"}},
		{"scan-", []string{"W2/scan-10k"}},
		{"W2/get-.*hit$", []string{"W2/get-pending-hit"}},
		{"W2/gc-1m", []string{"W2/gc-1m"}},
	}
	for _, tc := range cases {
		got, err := selectWorkloads(tc.pattern)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("selectWorkloads(%q) = %v, %v; want %v", tc.pattern, got, err, tc.want)
		}
	}
	var n int
	for _, s := range bench.Catalog() {
		n += len(s.Workloads)
	}
	if all, err := selectWorkloads(""); err != nil || len(all) != n {
		t.Errorf("empty pattern: %d workloads of %d, %v", len(all), n, err)
	}
	// A glob that matches nothing is never retried as a regexp: "W9*" as a
	// regexp matches every name.
	for _, bad := range []string{"W9/*", "W9*", "W[1", "nothing", "W9", "W2/get-(", "^W9"} {
		got, err := selectWorkloads(bad)
		if err == nil {
			t.Errorf("selectWorkloads(%q) = %v, want an error", bad, got)
		} else if !strings.Contains(err.Error(), "W8/delete-1m") && !strings.Contains(err.Error(), "regular expression (") {
			t.Errorf("selectWorkloads(%q): error %q does not list the workloads", bad, err)
		}
	}
}

// TestBenchSmoke runs a tiny configuration of every suite through the CLI:
// --json rows carry the documented fields, the SVG is written, the
// temporary engines are removed.
func TestBenchSmoke(t *testing.T) {
	tmp := t.TempDir()
	svg := filepath.Join(tmp, "chart.svg")
	code, out, errOut := runCLI(t, "bench", "--quick", "--workload", "W1/lookup-with(out)?-pending-changes$|W2/get-mixed$|W2/scan-10k|W4/flush-g4",
		"--scale", "0.0005", "--per-goroutine", "2", "--rounds", "2", "--json", "--svg", svg, "--dir", tmp, "--progress")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "100%") {
		t.Errorf("--progress drew no bar: %q", errOut)
	}
	seen := map[string]bool{}
	disk := map[bool]int{} // W4 rows with and without a disk figure
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		w, impl := r["workload"].(string), r["impl"].(string)
		seen[w] = true
		_, hasDisk := r["disk_bytes_per_user_byte"].(float64)
		if strings.HasPrefix(w, "W4/") {
			disk[hasDisk]++
		} else if hasDisk {
			t.Errorf("%s/%s (writes no user data): disk_bytes_per_user_byte %v", w, impl, r["disk_bytes_per_user_byte"])
		}
		for _, f := range []string{"ns_per_op", "allocs_per_op", "ns_per_op_min", "ns_per_op_max"} {
			if _, ok := r[f].(float64); !ok {
				t.Errorf("%s/%s: no numeric %s", w, impl, f)
			}
		}
		ratios, hasRatios := r["ratio_vs"].(map[string]any)
		if strings.HasPrefix(impl, "kvbuf") != hasRatios || (hasRatios && len(ratios) == 0) {
			t.Errorf("%s/%s: ratio_vs %v", w, impl, r["ratio_vs"])
		}
		if strings.HasPrefix(w, "W4/") {
			if _, ok := r["syncs_per_flush"].(float64); !ok {
				t.Errorf("%s/%s: no syncs_per_flush", w, impl)
			}
			if v, ok := r["violations"].(float64); !ok || (impl != "singleflight" && v != 0) {
				t.Errorf("%s/%s: violations %v", w, impl, r["violations"])
			}
		}
	}
	// "W1/lookup…|…" is not a glob match, so it is read as a regexp.
	want := []string{"W1/lookup-with-pending-changes", "W1/lookup-without-pending-changes", "W2/get-mixed", "W2/scan-10k", "W4/flush-g4"}
	var got []string
	for w := range seen {
		got = append(got, w)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("workloads run %v, want %v", got, want)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("vs mutex+map")) {
		t.Errorf("svg: %v\n%.300s", err, b)
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 1 {
		t.Errorf("bench left files behind in %s: %v", tmp, left)
	}
	// The table form, with a W4 row so its extra columns show.
	code, out, errOut = runCLI(t, "bench", "--workload", "W4/flush-g1", "--scale", "0.0005", "--per-goroutine", "1", "--rounds", "1", "--dir", tmp)
	if code != 0 || !strings.Contains(out, "SYNCS/FLUSH") || !strings.Contains(out, "per-caller-sync") || errOut != "" ||
		strings.Contains(out, "DISK/USER B") != (disk[true] > 0) {
		t.Errorf("bench table: exit %d\n%s\nstderr %q", code, out, errOut)
	}
	// W4's rows write: all of them have a disk figure, or (no count on
	// this system) none.
	if disk[true] > 0 && disk[false] > 0 {
		t.Errorf("W4 rows with a disk figure: %d, without: %d", disk[true], disk[false])
	}
}

func TestProgress(t *testing.T) {
	if p := newProgress(io.Discard, false, 10); p != nil {
		t.Error("progress bar on a non-terminal without --progress")
	}
	var buf bytes.Buffer
	p := newProgress(&buf, true, 4)
	p.add(1, "a")
	p.add(1, "a")
	p.add(0, "a") // unchanged: no redraw
	p.add(5, "b") // clamped at 100%
	p.finish()
	got := buf.String()
	if strings.Count(got, "\r[") != 3 || !strings.Contains(got, " 25% a") || !strings.Contains(got, "100% b") {
		t.Errorf("progress output %q", got)
	}
	var nilBar *progress
	nilBar.add(1, "x") // must not panic
	nilBar.finish()
}

// TestYCSBCPUProfile: --cpuprofile writes a profile pprof can read (a
// gzipped protocol buffer) covering the run; a path that cannot be created
// fails the run before anything is loaded.
func TestYCSBCPUProfile(t *testing.T) {
	tmp := t.TempDir()
	prof := filepath.Join(tmp, "cpu.prof")
	args := []string{"ycsb", "--quick", "--records", "200", "--ops", "200", "--workload", "c", "--db", "kvbuf",
		"--durability", "window", "--dir", tmp, "--cpuprofile", prof}
	if code, _, errOut := runCLI(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzipped", len(b))
	}
	args[len(args)-1] = filepath.Join(tmp, "missing", "cpu.prof")
	code, out, errOut := runCLI(t, args...)
	if code != exitError || !strings.Contains(errOut, "cpu profile") {
		t.Fatalf("unwritable profile path: exit %d, stderr %q", code, errOut)
	}
	if out != "" {
		t.Fatalf("a refused run printed:\n%s", out)
	}
}

// TestYCSBSmoke runs kvtool ycsb --quick on every engine and workload (a
// smoke test of the bindings and the command, not a benchmark).
func TestYCSBSmoke(t *testing.T) {
	tmp := t.TempDir()
	md := filepath.Join(tmp, "table.md")
	code, out, errOut := runCLI(t, "ycsb", "--quick", "--json", "--markdown", md, "--dir", tmp, "--progress")
	if code != 0 {
		t.Fatalf("ycsb: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "%") {
		t.Errorf("--progress drew no line: %q", errOut)
	}
	type opJSON struct {
		Count int64 `json:"count"`
		P50   int64 `json:"p50_ns"`
		P99   int64 `json:"p99_ns"`
		P999  int64 `json:"p999_ns"`
	}
	type rowJSON struct {
		Workload     string            `json:"workload"`
		Threads      int               `json:"threads"`
		DB           string            `json:"db"`
		Durability   string            `json:"durability"`
		Records      int64             `json:"records"`
		Rounds       int               `json:"rounds"`
		OpsPerRound  int64             `json:"ops_per_round"`
		OpsPerSec    float64           `json:"ops_per_sec"`
		KvbufSpeedup float64           `json:"kvbuf_speedup"`
		Disk         *float64          `json:"disk_bytes_per_user_byte"`
		Ops          map[string]opJSON `json:"ops"`
	}
	seen := map[string]bool{}
	disk := map[bool]int{} // rows that write, with and without a disk figure
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r rowJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		id := r.Workload + "/" + r.DB
		seen[id] = true
		if (r.Durability != "window" && r.Durability != "acked") || (r.DB == "bbolt" && r.Durability != "acked") {
			t.Errorf("%s: durability %q", id, r.Durability)
		}
		if r.OpsPerSec <= 0 || r.OpsPerRound <= 0 || r.Rounds != 1 || r.Threads != 1 || r.Records < 2000 || len(r.Ops) == 0 {
			t.Errorf("%s: %+v", id, r)
		}
		if (r.DB == "kvbuf") != (r.KvbufSpeedup == 0) {
			t.Errorf("%s: kvbuf_speedup %v", id, r.KvbufSpeedup)
		}
		// Workload c only reads: no user data written, no disk figure;
		// badger cannot be waited out after a run: none either.
		if (r.Workload == "c" || r.DB == "badger") && r.Disk != nil {
			t.Errorf("%s: disk_bytes_per_user_byte %v for a read-only workload or badger", id, *r.Disk)
		} else if r.Workload != "c" && r.DB != "badger" {
			disk[r.Disk != nil]++
		}
		var n int64
		for op, s := range r.Ops {
			if s.Count <= 0 || s.P50 <= 0 || s.P50 > s.P99 || s.P99 > s.P999 {
				t.Errorf("%s %s: %+v", id, op, s)
			}
			if !strings.HasSuffix(op, "@FLUSH") {
				n += s.Count
			}
		}
		if r.Workload == "f" { // a read-modify-write is timed as a whole and as its read and update
			n = r.Ops["READ"].Count
		}
		if r.Workload != "load" && n != r.OpsPerRound {
			t.Errorf("%s: %d operations timed, %d done", id, n, r.OpsPerRound)
		}
	}
	for _, w := range []string{"load", "a", "b", "c", "d", "e", "f"} {
		for _, db := range []string{"kvbuf", "pebble", "badger", "bbolt"} {
			if !seen[w+"/"+db] {
				t.Errorf("no row for workload %s on %s", w, db)
			}
		}
	}
	if disk[true] > 0 && disk[false] > 0 {
		t.Errorf("rows that write with a disk figure: %d, without: %d (all or, with no count, none)", disk[true], disk[false])
	}
	b, err := os.ReadFile(md)
	// One table per durability mode, each a header, its rule and 7 lines.
	if err != nil || !bytes.Contains(b, []byte("| workload | threads | kvbuf ops/s |")) || bytes.Count(b, []byte("\n| ")) != 18 ||
		!bytes.Contains(b, []byte("Durability `window`")) || !bytes.Contains(b, []byte("kvbuf ÷ bbolt")) {
		t.Errorf("markdown: %v\n%s", err, b)
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 1 {
		t.Errorf("ycsb left files behind in %s: %v", tmp, left)
	}
	// The table form, two thread counts, one engine, a properties file.
	props := filepath.Join(tmp, "mine.properties")
	write(t, props, "readproportion=0.5\nscanproportion=0.5\nrequestdistribution=uniform\nfieldcount=3\nfieldlength=10\n")
	code, out, errOut = runCLI(t, "ycsb", "--quick", "--db", "pebble", "--workload", props, "--threads", "1,2", "--dir", tmp)
	if code != 0 || errOut != "" || !strings.Contains(out, "acked       mine      2        pebble") || !strings.Contains(out, "SCAN") {
		t.Errorf("ycsb table: exit %d\n%s\nstderr %q", code, out, errOut)
	}
}
