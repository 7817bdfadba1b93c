package ycsb

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"
)

// Strict property getters: go-ycsb's properties package returns the default
// for a value that does not parse; a benchmark that silently ran with
// another setting would mislead, so these return ErrBadProperty instead.

func getInt(p *properties.Properties, key string, def, lo, hi int64) (int64, error) {
	s, ok := p.Get(key)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%w: %s=%q: want an integer from %d to %d", ErrBadProperty, key, s, lo, hi)
	}
	return v, nil
}

func getFloat(p *properties.Properties, key string, def, lo, hi float64) (float64, error) {
	s, ok := p.Get(key)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(v >= lo && v <= hi) {
		return 0, fmt.Errorf("%w: %s=%q: want a number from %g to %g", ErrBadProperty, key, s, lo, hi)
	}
	return v, nil
}

func getBool(p *properties.Properties, key string, def bool) (bool, error) {
	s, ok := p.Get(key)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: want true or false", ErrBadProperty, key, s)
	}
	return v, nil
}

func getDuration(p *properties.Properties, key string, def time.Duration) (time.Duration, error) {
	s, ok := p.Get(key)
	if !ok {
		return def, nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q: want a duration such as 500ms or 2s", ErrBadProperty, key, s)
	}
	return v, nil
}

func getChoice(p *properties.Properties, key, def string, choices ...string) (string, error) {
	s, ok := p.Get(key)
	if !ok {
		return def, nil
	}
	s = strings.TrimSpace(s)
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: %s=%q: want one of %s", ErrBadProperty, key, s, strings.Join(choices, ", "))
}

// mkdirAll creates dir (engines that keep a single file need it).
func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
