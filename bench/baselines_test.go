package bench

import (
	"testing"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/storage"
)

// TestBaselineCache: a pebble baseline's block cache is the engine's cache
// plus its read tier (the memory the engine reads flushed data with), the
// defaults included, and the cache alone when the tier is disabled.
func TestBaselineCache(t *testing.T) {
	for _, c := range []struct {
		name string
		o    *kvbuf.Options
		want int64
	}{
		{"defaults", nil, storage.DefaultCacheSize + kvbuf.DefaultReadTierBytes},
		{"tier disabled", &kvbuf.Options{ReadTierBytes: -1}, storage.DefaultCacheSize},
		{"both set", &kvbuf.Options{CacheSize: 1 << 20, ReadTierBytes: 3 << 20}, 4 << 20},
	} {
		if got := baselineCache(c.o); got != c.want {
			t.Errorf("%s: baseline cache %d, want %d", c.name, got, c.want)
		}
	}
}
