// Package gofiles walks the Go source of a tree the way the repository's
// source checks read it: every non-test .go file, skipping testdata,
// vendor and hidden directories.
package gofiles

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// Walk parses every non-test Go file under root with the given parser mode
// and calls fn with its path, the file set and the parsed file, in lexical
// order. It stops at the first error: a walk or parse error, or fn's.
func Walk(root string, mode parser.Mode, fn func(path string, fset *token.FileSet, f *ast.File) error) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, mode)
		if err != nil {
			return err
		}
		return fn(path, fset, file)
	})
}

// ReceiverName returns the name of a method's receiver type (T for T, *T,
// T[P] and *T[P]), or "" if it is not a plain name.
func ReceiverName(recv *ast.FieldList) string {
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
