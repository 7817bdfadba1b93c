package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Suite is one workload family set up once: its workloads share the
// engines and files in one temporary directory. Close releases them and
// removes the directory.
type Suite struct {
	// Name is "W1", "W2" or "W4".
	Name string
	// Workloads are in the order they must run (W1's pending changes are
	// added between its two workloads).
	Workloads []*Workload

	dir     string
	closers []func() error
	closed  bool
}

// Dir returns the suite's temporary directory.
func (s *Suite) Dir() string { return s.dir }

// onClose registers f to run at Close, in reverse order of registration.
func (s *Suite) onClose(f func() error) { s.closers = append(s.closers, f) }

// Close closes every engine and file of the suite and removes its
// directory. It is idempotent.
func (s *Suite) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	for _, f := range slices.Backward(s.closers) {
		err = errors.Join(err, f())
	}
	if s.dir != "" {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	if err != nil {
		return fmt.Errorf("bench: close suite %s: %w", s.Name, err)
	}
	return nil
}

// Workload returns the suite's workload called name, or nil.
func (s *Suite) Workload(name string) *Workload {
	for _, w := range s.Workloads {
		if w.Name == name {
			return w
		}
	}
	return nil
}

// Catalog lists every suite and its canonical workload names, in run
// order, without setting anything up (for selecting workloads by name).
func Catalog() []SuiteInfo {
	return []SuiteInfo{
		{"W1", []string{"W1/lookup-without-pending-changes", "W1/lookup-with-pending-changes"}},
		{"W2", []string{"W2/get-pending-hit", "W2/get-pending-tombstone", "W2/get-miss", "W2/get-mixed", "W2/scan-10k"}},
		{"W4", []string{"W4/flush-g1", "W4/flush-g4", "W4/flush-g16", "W4/flush-g64"}},
	}
}

// SuiteInfo names a suite and its workloads.
type SuiteInfo struct {
	Name      string
	Workloads []string
}

// Open sets up the suite called name ("W1", "W2" or "W4") in a new
// temporary directory under cfg.Dir. The caller must Close it.
func Open(ctx context.Context, name string, cfg *Config) (*Suite, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var setup func(context.Context, *Suite, Config) error
	switch name {
	case "W1":
		setup = setupW1
	case "W2":
		setup = setupW2
	case "W4":
		setup = setupW4
	default:
		return nil, fmt.Errorf("%w: unknown suite %q", ErrBadConfig, name)
	}
	dir, err := os.MkdirTemp(c.Dir, "kvbuf-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s := &Suite{Name: name, dir: dir}
	if err := setup(ctx, s, c); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: set up %s in %s: %w", name, dir, err), s.Close())
	}
	return s, nil
}
