// Command apiusers lists, for each exported name of some packages, whether
// another package of the module uses it: what an API cut may unexport.
//
// Usage:
//
//	go run ./scripts/apiusers [-importers pkg,...] pkg...
//
// For every exported top-level name of each pkg, and every exported method
// and field of its exported types, it prints one line: the package, the
// name (Type.Method for a method or field), and who uses it from outside
// the package: "product" (the importers' non-test files), "test" (only
// their test files of the same package), or "none". Then one summary line
// per package. -importers names the packages to search (default: the
// module's root package, the only importer of buffer and flush); test
// files with build tags (failpoints, invariants) are not read, so a name a
// tagged test uses shows as "none": `go vet -tags ...` finds it.
//
// Methods that implement a standard interface by name (Error, String,
// Unwrap, ...) are listed as "interface": something may call them through
// an interface value without naming them.
//
// The importers are type-checked from source against the export data of
// their dependencies (`go list -export`), so the command needs a tree that
// builds.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvbuf/kvbuf/scripts/internal/gofiles"
)

type listed struct {
	ImportPath  string
	Dir         string
	Export      string
	GoFiles     []string
	TestGoFiles []string
}

func main() {
	importers := flag.String("importers", "github.com/kvbuf/kvbuf", "comma-separated import paths of the packages that use the names")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apiusers [-importers pkg,...] pkg...")
		os.Exit(2)
	}
	if err := run(strings.Split(*importers, ","), flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "apiusers:", err)
		os.Exit(1)
	}
}

func run(importers, targets []string) error {
	args := append([]string{"list", "-e", "-export", "-deps", "-test", "-json"}, importers...)
	args = append(args, targets...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	pkgs := map[string]*listed{}
	exports := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return err
		}
		if p.Export != "" && !strings.Contains(p.ImportPath, " ") && !strings.HasSuffix(p.ImportPath, ".test") {
			exports[p.ImportPath] = p.Export
		}
		if !strings.Contains(p.ImportPath, " ") && !strings.HasSuffix(p.ImportPath, ".test") {
			pkgs[p.ImportPath] = &p
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(e)
	})
	product := map[string]bool{} // "pkgpath.Name" or "pkgpath.Type.Name"
	test := map[string]bool{}
	for _, ip := range importers {
		p := pkgs[ip]
		if p == nil {
			return fmt.Errorf("importer %s not listed", ip)
		}
		if err := uses(fset, imp, p, p.GoFiles, product); err != nil {
			return err
		}
		if err := uses(fset, imp, p, append(slices.Clone(p.GoFiles), p.TestGoFiles...), test); err != nil {
			return err
		}
	}
	for _, tp := range targets {
		p := pkgs[tp]
		if abs, err := filepath.Abs(tp); err == nil && p == nil {
			for _, q := range pkgs {
				if q.Dir == abs {
					p = q
				}
			}
		}
		if p == nil {
			return fmt.Errorf("package %s not listed", tp)
		}
		names, err := exportedNames(p)
		if err != nil {
			return err
		}
		counts := map[string]int{}
		for _, n := range names {
			key := p.ImportPath + "." + n
			who := "none"
			switch {
			case product[key]:
				who = "product"
			case test[key]:
				who = "test"
			case stdMethod(n):
				who = "interface"
			}
			counts[who]++
			fmt.Printf("%s\t%s\t%s\n", p.ImportPath, n, who)
		}
		fmt.Printf("# %s: %d exported; product %d, test %d, interface %d, none %d\n",
			p.ImportPath, len(names), counts["product"], counts["test"], counts["interface"], counts["none"])
	}
	return nil
}

// uses type-checks files of p and records every object of another
// package that they name.
func uses(fset *token.FileSet, imp types.Importer, p *listed, files []string, into map[string]bool) error {
	var asts []*ast.File
	for _, f := range files {
		a, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		asts = append(asts, a)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	if _, err := conf.Check(p.ImportPath, fset, asts, info); err != nil {
		return fmt.Errorf("type-check %s: %w", p.ImportPath, err)
	}
	for _, obj := range info.Uses {
		record(obj, into)
	}
	for _, sel := range info.Selections {
		record(sel.Obj(), into)
	}
	return nil
}

func record(obj types.Object, into map[string]bool) {
	if obj == nil || obj.Pkg() == nil || !obj.Exported() {
		return
	}
	path := obj.Pkg().Path()
	switch o := obj.(type) {
	case *types.Func:
		if sig, ok := o.Type().(*types.Signature); ok && sig.Recv() != nil {
			if n := recvName(sig.Recv().Type()); n != "" {
				into[path+"."+n+"."+o.Name()] = true
			}
			return
		}
	case *types.Var:
		if o.IsField() {
			// Fields are recorded by name under every type: the
			// declaration walk below asks for Type.Field.
			into[path+".field."+o.Name()] = true
			return
		}
	}
	into[path+"."+obj.Name()] = true
}

func recvName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// exportedNames lists p's exported top-level names and the exported
// methods of its exported types (the names scripts/apisurface counts).
func exportedNames(p *listed) ([]string, error) {
	fset := token.NewFileSet()
	var names []string
	for _, f := range p.GoFiles {
		a, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range a.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, d.Name.Name)
				} else if r := gofiles.ReceiverName(d.Recv); r != "" && ast.IsExported(r) {
					names = append(names, r+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// stdMethod reports whether a Type.Method name is one a standard interface
// asks for.
func stdMethod(n string) bool {
	i := strings.LastIndexByte(n, '.')
	if i < 0 {
		return false
	}
	switch n[i+1:] {
	case "Error", "String", "Unwrap", "Is", "As", "Format", "GoString":
		return true
	}
	return false
}
