// Command doccheck fails when a doc comment does not start with the name of
// the declaration it documents, the usual sign of a comment left behind by a
// rename (a comment that still says fold64 above foldTables64), and when an
// exported name of a package other than main has no doc comment: a
// function, a method of an exported type, a type, or a constant or variable
// with neither a comment of its own (above it or on its line) nor its
// group's.
//
// Usage:
//
//	go run ./scripts/doccheck [dir ...]
//
// With no argument it walks the current directory. It checks every
// function, method and type with a doc comment, exported or not, and every
// exported constant or variable declared alone with a doc comment (a
// grouped declaration's comment describes the group). A comment may start
// with "A", "An" or "The" before the name, as Go's own doc comments do, and
// a comment that starts with "Deprecated:" is accepted; init and main are
// not checked. Outside package main it also reports every exported
// function, method of an exported type, type, constant and variable with
// no doc comment (a type in a group needs its own comment, or the group's
// if it is alone; a constant or variable may have its own, a line comment
// or its group's). Test files, testdata and hidden directories are
// skipped. It prints one line per finding (file:line: name: first words,
// or "no doc comment") and exits 1 if there was any, 2 on a parse error.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"

	"github.com/kvbuf/kvbuf/scripts/internal/gofiles"
)

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var findings []string
	for _, root := range roots {
		f, err := walk(root)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doccheck:", err)
			os.Exit(2)
		}
		findings = append(findings, f...)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(os.Stderr, "doccheck: %d doc comments missing or not starting with the name they document\n", len(findings))
		os.Exit(1)
	}
}

// walk checks every non-test Go file under root.
func walk(root string) ([]string, error) {
	var out []string
	err := gofiles.Walk(root, parser.ParseComments, func(_ string, fset *token.FileSet, f *ast.File) error {
		out = append(out, checkFile(fset, f)...)
		return nil
	})
	return out, err
}

// checkFile returns the findings of one parsed file.
func checkFile(fset *token.FileSet, file *ast.File) []string {
	var out []string
	report := func(doc *ast.CommentGroup, name string) {
		if doc == nil || startsWithName(doc.Text(), name) {
			return
		}
		first := strings.Join(strings.Fields(doc.Text())[:min(4, len(strings.Fields(doc.Text())))], " ")
		out = append(out, fmt.Sprintf("%s: %s: %q", fset.Position(doc.Pos()), name, first))
	}
	// Exported names of a package other than main are its API (or, under
	// internal/, its packages' API): each needs a doc comment, a
	// grouped constant or variable its own or its group's.
	api := file.Name.Name != "main"
	missing := func(pos token.Pos, name string) {
		out = append(out, fmt.Sprintf("%s: %s: no doc comment", fset.Position(pos), name))
	}
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			// init and main are never called by name, so their comments
			// say what they do instead.
			if d.Recv == nil && (d.Name.Name == "init" || d.Name.Name == "main") {
				continue
			}
			if d.Doc == nil && api && d.Name.IsExported() && exportedRecv(d) {
				missing(d.Pos(), d.Name.Name)
			}
			report(d.Doc, d.Name.Name)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if doc == nil && len(d.Specs) == 1 {
						doc = d.Doc
					}
					if doc == nil && api && s.Name.IsExported() {
						missing(s.Pos(), s.Name.Name)
					}
					report(doc, s.Name.Name)
				case *ast.ValueSpec:
					if api && s.Doc == nil && d.Doc == nil && s.Comment == nil {
						for _, n := range s.Names {
							if n.IsExported() {
								missing(n.Pos(), n.Name)
							}
						}
					}
					// A grouped declaration's comment describes the group,
					// and unexported values are often documented by the
					// group; check only exported values declared alone.
					if len(d.Specs) != 1 || len(s.Names) != 1 || !s.Names[0].IsExported() {
						continue
					}
					report(d.Doc, s.Names[0].Name)
				}
			}
		}
	}
	return out
}

// exportedRecv reports whether d is a function or a method of an exported
// type: a method of an unexported type is not in the package's API.
func exportedRecv(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}

// startsWithName reports whether text starts with name, optionally after an
// article, or is a deprecation notice.
func startsWithName(text, name string) bool {
	words := strings.Fields(text)
	if len(words) == 0 {
		return true
	}
	if words[0] == "Deprecated:" {
		return true
	}
	if (words[0] == "A" || words[0] == "An" || words[0] == "The") && len(words) > 1 {
		words = words[1:]
	}
	w := strings.TrimRight(words[0], ".,:;'")
	return w == name || strings.TrimSuffix(w, "'s") == name
}
