package gofiles

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWalk(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.go", "a_test.go", "sub/b.go", "testdata/c.go", ".hidden/d.go", "vendor/e.go", "notes.txt"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err := Walk(dir, parser.PackageClauseOnly, func(path string, _ *token.FileSet, _ *ast.File) error {
		rel, _ := filepath.Rel(dir, path)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.go", "sub/b.go"}; !slices.Equal(got, want) {
		t.Fatalf("walked %v, want %v", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte("packag"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Walk(dir, 0, func(string, *token.FileSet, *ast.File) error { return nil }); err == nil {
		t.Fatal("a file that does not parse was walked")
	}
}
