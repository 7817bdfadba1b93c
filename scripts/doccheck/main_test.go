package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

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
	want := []string{"foldTables64", "Put", "Exported", "quad"}
	if !slices.Equal(names, want) {
		t.Fatalf("findings for %v, want %v", names, want)
	}
}
