package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// Issue 20: after `kvtool load -n 2000 e1` and `rm e1/bits/load.bits`,
// `kvtool inspect e1` exited 0 with "bitslices: 0". An older copy of the
// file and another engine's file passed too. inspect now checks every
// bitslice against the engine's record, as Open does, and names each
// problem in one line, exit 1.
func TestInspectReportsBitsliceProblems(t *testing.T) {
	base := t.TempDir()
	load := func(name string, n string) string {
		dir := filepath.Join(base, name)
		if code, _, errOut := runCLI(t, "load", "-n", n, dir); code != 0 {
			t.Fatalf("load %s: exit %d: %s", name, code, errOut)
		}
		return dir
	}
	bits := func(dir string) string { return filepath.Join(dir, enginedir.BitsDir, "load.bits") }

	e1 := load("e1", "2000")
	if err := os.Remove(bits(e1)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "inspect", e1)
	checkError(t, code, out, errOut, `the engine will not open (corrupt engine directory: restore the files from a backup or a checkpoint): bitslice "load": recorded by the engine (generation 1, `)

	e2 := load("e2", "300")
	old, err := os.ReadFile(bits(e2))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "load", "-n", "300", "-seed", "2", e2); code != 0 {
		t.Fatalf("second load: exit %d: %s", code, errOut)
	}
	if err := os.WriteFile(bits(e2), old, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "inspect", e2)
	checkError(t, code, out, errOut, `bitslice "load": an older copy: the file's last write is generation 1, the engine recorded generation 2`)

	e3 := load("e3", "10")
	foreign, err := os.ReadFile(bits(load("other", "10")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e3, enginedir.BitsDir, "extra.bits"), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "inspect", e3)
	checkError(t, code, out, errOut, `bitslice "extra": the file belongs to another engine`)
	for _, dir := range []string{e1, e2, e3} {
		if _, err := kvbuf.Open(dir, nil); !errors.Is(err, kvbuf.ErrCorrupt) {
			t.Errorf("Open(%s): %v, want ErrCorrupt as inspect said", dir, err)
		}
	}
}

// load validates its names before anything touches the disk: a bad one is
// a usage error (exit 2) and creates nothing (it created an engine
// directory and exited 1).
func TestLoadBadNameCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "newdir")
	for _, args := range [][]string{{"--keyspace", "bad name"}, {"--bits", "a/b"}, {"--keyspace", ""}} {
		code, out, errOut := runCLI(t, append(append([]string{"load"}, args...), dir)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "names are 1-128 bytes") {
			t.Errorf("load %v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("load %v created %s (%v)", args, dir, err)
		}
	}
}

// kvtool checkpoint copies an engine into a new directory that opens as an
// engine of its own, at the watermark it printed; a second checkpoint
// into the same place is refused and changes nothing.
func TestCheckpointCommand(t *testing.T) {
	src := copyFixture(t)
	dest := filepath.Join(t.TempDir(), "backups", "cp1")
	code, out, errOut := runCLI(t, "checkpoint", "--json", src, dest)
	if code != 0 {
		t.Fatalf("checkpoint: exit %d: %s", code, errOut)
	}
	var cj checkpointJSON
	if err := json.Unmarshal([]byte(out), &cj); err != nil {
		t.Fatal(err)
	}
	if cj.Watermark != 400 || cj.Checkpoint != dest || strings.Join(cj.Bitslices, ",") != "live" || cj.Size <= 0 {
		t.Fatalf("checkpoint --json: %+v", cj)
	}
	e, c := inspectJSONOf(t, src), inspectJSONOf(t, dest)
	if *c.Watermark != 400 || c.EngineID == nil || *c.EngineID == *e.EngineID || len(c.Bitslices) != 1 ||
		c.Bitslices[0].SetBits != e.Bitslices[0].SetBits {
		t.Fatalf("inspect of the checkpoint: %+v (of %+v)", c, e)
	}
	if got, want := engineContents(t, dest), engineContents(t, src); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatal("the checkpoint's content differs from the engine's")
	}
	code, out, errOut = runCLI(t, "checkpoint", src, dest)
	checkError(t, code, out, errOut, "it is an engine directory already")
	code, out, _ = runCLI(t, "checkpoint", src, filepath.Join(t.TempDir(), "cp2"))
	if code != 0 || !strings.Contains(out, "watermark:  400 (replay the host's log from op 401)") {
		t.Fatalf("checkpoint text output: exit %d\n%s", code, out)
	}
}

// A format-1 engine (testdata/engine-v1) is upgraded by any command that
// opens it: after `kvtool flush`, inspect shows format 2, an engine id and
// the bitslice recorded.
func TestFormat1FixtureUpgradedByFlush(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e")
	if err := os.CopyFS(dir, os.DirFS(engineFixture+"-v1")); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "flush", dir); code != 0 {
		t.Fatalf("flush: exit %d: %s", code, errOut)
	}
	e := inspectJSONOf(t, dir)
	if e.FormatVersion != 2 || e.EngineID == nil || len(e.Bitslices) != 1 || e.Bitslices[0].FormatVersion != 2 ||
		e.Bitslices[0].Owner != *e.EngineID || e.Bitslices[0].Catalog == nil {
		t.Fatalf("after the upgrade: %+v %+v", e, e.Bitslices)
	}
}
