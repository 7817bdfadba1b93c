package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// TestCheckFileMain checks that a main package's exported names need no
// comment: they are no package's API.
func TestCheckFileMain(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "m.go", "package main\n\nfunc Run() {}\n\ntype T int\n", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if got := checkFile(fset, f); len(got) != 0 {
		t.Fatalf("findings %v in package main, want none", got)
	}
}

func TestCheckFile(t *testing.T) {
	const src = `package p

// Good does things.
func Good() {}

// fold64 is the old name.
func foldTables64() {}

// A Thing is fine with an article.
type Thing struct{}

// Get's receiver form is fine.
func (Thing) Get() {}

// Returns something: no name.
func (Thing) Put() {}

// Deprecated: use Good.
func Old() {}

// MaxSize is alone.
const MaxSize = 1

// Wrong words here.
var Exported = 2

// group comment
const (
	a = 1
	B = 2
)

// setup runs first.
func init() {}

func Bare() {}

func (pair) Hidden() {}

func (*Thing) NoDoc() {}

const (
	Loose = 1 // Loose has a line comment.
	Naked = 2
)

// pair is documented per spec.
type (
	// pair is right.
	pair struct{}
	// trio is wrong.
	quad struct{}
)
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, finding := range checkFile(fset, f) {
		names = append(names, strings.Split(finding, ": ")[1])
	}
	want := []string{"foldTables64", "Put", "Exported", "Bare", "NoDoc", "Naked", "quad"}
	if !slices.Equal(names, want) {
		t.Fatalf("findings for %v, want %v", names, want)
	}
}
