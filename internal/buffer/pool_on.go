//go:build !kvbuf_nopool

package buffer

// poolEnabled is false when built with the kvbuf_nopool tag.
const poolEnabled = true
