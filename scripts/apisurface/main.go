// Command apisurface counts the exported names of each package: what a
// user of the package can name, and so what its documentation must cover.
//
// Usage:
//
//	go run ./scripts/apisurface [dir]
//
// With no argument it walks the current directory. For every directory
// holding a non-main package it prints the directory and the number of
// exported top-level constants, variables, types and functions plus the
// exported methods of exported types, then a total, then the public part
// of it: the packages a program outside the module can import (not under
// internal/; bench, examples and scripts are the repository's tools, not its
// API, and are left out of that line too). Test files, testdata, hidden
// directories and package main (commands, scripts) are skipped; internal
// packages are counted (they are an API to the module).
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvbuf/kvbuf/scripts/internal/gofiles"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	counts, err := count(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apisurface:", err)
		os.Exit(2)
	}
	total, public := 0, 0
	for _, dir := range slices.Sorted(maps.Keys(counts)) {
		fmt.Printf("%-24s %4d\n", dir, counts[dir])
		total += counts[dir]
		if isPublic(dir) {
			public += counts[dir]
		}
	}
	fmt.Printf("%-24s %4d\n", "total", total)
	fmt.Printf("%-24s %4d\n", "public", public)
}

// isPublic reports whether the package at dir (relative to the module's
// root) is part of the module's API: importable from outside the module
// (not internal) and not one of the repository's tools.
func isPublic(dir string) bool {
	for _, part := range strings.Split(filepath.ToSlash(dir), "/") {
		if part == "internal" {
			return false
		}
	}
	first, _, _ := strings.Cut(filepath.ToSlash(dir), "/")
	switch first {
	case "bench", "examples", "scripts":
		return false
	}
	return true
}

// count returns the exported names per package directory under root.
func count(root string) (map[string]int, error) {
	counts := map[string]int{}
	err := gofiles.Walk(root, parser.SkipObjectResolution, func(path string, _ *token.FileSet, f *ast.File) error {
		if f.Name.Name == "main" {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		counts[dir] += exported(f)
		return nil
	})
	return counts, err
}

// exported counts the exported names one file declares.
func exported(file *ast.File) int {
	n := 0
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || ast.IsExported(gofiles.ReceiverName(d.Recv)) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}
