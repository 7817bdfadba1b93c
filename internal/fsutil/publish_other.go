//go:build !linux

package fsutil

// Publish links tmp to path unless path exists (an error wrapping
// fs.ErrExist; fs.ErrNotExist if tmp is gone), then drops the name tmp.
// Neither syncs the directory: call SyncDir once the new name must survive
// a crash.
func Publish(tmp, path string) error { return LinkPublish(tmp, path) }
