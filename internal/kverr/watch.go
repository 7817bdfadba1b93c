package kverr

// The change feed's sentinels (kvbuf.DB.Watch). ErrLagged and ErrCompacted
// both match ErrResync, so a subscriber needs one check to know it must
// bootstrap again from a snapshot.
var (
	// ErrResync is matched by every error that ends a watch because the
	// changes it needs are no longer held: resync from a snapshot and watch
	// from its Op()+1.
	ErrResync = newSentinel("resync from a snapshot", nil)
	// ErrLagged: a watch fell behind the feed's bounded buffer.
	ErrLagged = newSentinel("watch fell behind the change buffer", ErrResync)
	// ErrCompacted: a watch's start is below the changes the feed holds.
	ErrCompacted = newSentinel("watch start below the changes held", ErrResync)
)
