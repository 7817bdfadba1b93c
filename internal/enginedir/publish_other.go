//go:build !linux

package enginedir

// publish links tmp to path unless path exists (an error wrapping
// fs.ErrExist; fs.ErrNotExist if tmp is gone), then drops the name tmp.
func publish(tmp, path string) error { return linkPublish(tmp, path) }
