package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCount(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/a.go", `package a

const C, d = 1, 2
var V int
type T struct{}
type u struct{}
type G[K any] struct{}
func F() {}
func f() {}
func (T) M() {}
func (*T) m() {}
func (u) M() {}
func (*G[K]) M() {}
`)
	write("a/a_test.go", "package a\nfunc TestX() {}\n")
	write("cmd/c/main.go", "package main\nfunc Exported() {}\nfunc main() {}\n")
	write("a/testdata/x.go", "package x\nfunc Y() {}\n")
	got, err := count(dir)
	if err != nil {
		t.Fatal(err)
	}
	// C, V, T, G, F, T.M, G.M: not d, u, f, T.m, u.M, the test, main, testdata.
	if len(got) != 1 || got["a"] != 7 {
		t.Fatalf("counts %v, want map[a:7]", got)
	}
}

func TestBadFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte("package"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := count(dir); err == nil {
		t.Fatal("a file that does not parse was counted")
	}
}

func TestIsPublic(t *testing.T) {
	for dir, want := range map[string]bool{
		".":                true,
		"storage":          true,
		"raftkv":           true,
		"internal/buffer":  false,
		"a/internal":       false,
		"a/internal/b":     false,
		"internalish":      true,
		"bench":            false,
		"bench/ycsb":       false,
		"examples/dochost": false,
		"scripts/x":        false,
	} {
		if got := isPublic(dir); got != want {
			t.Errorf("isPublic(%q) = %v, want %v", dir, got, want)
		}
	}
}
