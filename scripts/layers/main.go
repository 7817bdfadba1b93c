// Command layers checks the module's imports against the layers
// doc/design.md lists ("Packages"): it prints every import of a package by
// a package of a lower layer (an upward import), and every package the list
// does not place, then a count of each.
//
// Usage:
//
//	go run ./scripts/layers [-design doc/design.md] [-tests=true]
//
// The list is the numbered lines between <!-- layers --> and
// <!-- /layers --> in the design document: "N. name: `pkg` `pkg` ...",
// lowest layer first, each package a directory relative to the module's
// root ("kvbuf" is the root; "dir/..." is dir and everything below it).
// With -tests (the default) the imports of test files count too, marked
// "(test)". It runs `go list`, so it reads the tree as it builds; it
// exits 1 if it found an upward import or an unplaced package.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func main() {
	design := flag.String("design", "doc/design.md", "the design document holding the layer list")
	tests := flag.Bool("tests", true, "count the imports of test files too")
	flag.Parse()
	n, err := run(*design, *tests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	if n > 0 {
		os.Exit(1)
	}
}

type layer struct {
	n     int
	name  string
	pkgs  []string // exact directories
	trees []string // dir/... patterns, without "/..."
}

var lineRE = regexp.MustCompile("^([0-9]+)\\. ([^:]+):(.*)$")
var pkgRE = regexp.MustCompile("`([^`]+)`")

func readLayers(path string) ([]layer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ls []layer
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "<!-- layers -->":
			in = true
			continue
		case line == "<!-- /layers -->":
			in = false
			continue
		}
		if !in || line == "" {
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s: not a layer line: %q", path, line)
		}
		n, _ := strconv.Atoi(m[1])
		l := layer{n: n, name: m[2]}
		for _, p := range pkgRE.FindAllStringSubmatch(m[3], -1) {
			if t, ok := strings.CutSuffix(p[1], "/..."); ok {
				l.trees = append(l.trees, t)
			} else {
				l.pkgs = append(l.pkgs, p[1])
			}
		}
		ls = append(ls, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("%s: no layer list between <!-- layers --> and <!-- /layers -->", path)
	}
	return ls, nil
}

// place returns the layer of the package at dir ("kvbuf" for the root),
// or 0 if the list does not place it.
func place(ls []layer, dir string) int {
	best, bestLen := 0, -1
	for _, l := range ls {
		if slices.Contains(l.pkgs, dir) {
			return l.n
		}
		for _, t := range l.trees {
			if (dir == t || strings.HasPrefix(dir, t+"/")) && len(t) > bestLen {
				best, bestLen = l.n, len(t)
			}
		}
	}
	return best
}

func run(design string, tests bool) (int, error) {
	ls, err := readLayers(design)
	if err != nil {
		return 0, err
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return 0, fmt.Errorf("go list -m: %w", err)
	}
	module := strings.TrimSpace(string(mod))
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		return 0, fmt.Errorf("go list: %w", err)
	}
	dir := func(ip string) (string, bool) {
		if ip == module {
			return "kvbuf", true
		}
		d, ok := strings.CutPrefix(ip, module+"/")
		return d, ok
	}
	var ups, unplaced []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return 0, err
		}
		from, _ := dir(p.ImportPath)
		lf := place(ls, from)
		if lf == 0 {
			unplaced = append(unplaced, from)
			continue
		}
		check := func(imports []string, mark string) {
			for _, ip := range imports {
				to, ok := dir(ip)
				if !ok || to == from {
					continue
				}
				lt := place(ls, to)
				if lt > lf {
					ups = append(ups, fmt.Sprintf("%s (layer %d) imports %s (layer %d)%s", from, lf, to, lt, mark))
				}
			}
		}
		check(p.Imports, "")
		if tests {
			check(p.TestImports, " (test)")
			check(p.XTestImports, " (test)")
		}
	}
	slices.Sort(ups)
	ups = slices.Compact(ups)
	for _, u := range ups {
		fmt.Println("up:", u)
	}
	for _, u := range unplaced {
		fmt.Println("unplaced:", u)
	}
	fmt.Printf("%d upward imports, %d unplaced packages\n", len(ups), len(unplaced))
	return len(ups) + len(unplaced), nil
}
