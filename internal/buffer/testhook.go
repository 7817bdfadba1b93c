package buffer

import "sync/atomic"

// testHook, nil outside tests, is called at these points so that a test
// can make a writer act exactly there: "iter-pin" (NewIter has loaded the
// view and not yet pinned its tables or loaded its visible number),
// "probe-slot" (a point read's general path, probeAppend, found a tag
// match and loaded the slot's head word, not yet its key words),
// "read-copy" (a point read found a change in a version record and has
// not copied it yet), "bits-page" (a bits read loaded a sealed table's
// page and not yet its word), "bits-filter" (a bits Get loaded a view
// that is not fast, published while filterHook was on, and has not yet
// read the word filters),
// "bits-and" (a bits write of 0 found a bit pending as 1 with its atomic
// OR and has not yet cleared it with its AND), "bits-fill" (SetMany
// filled a page for a directory entry it found empty and has not yet
// installed it), "pool-clear" (the pool cleared a released table and
// has not yet kept it) and, in the invariants build only (the normal
// build's Lookup must fit the inliner's budget), "bits-lookup-direct"
// (Lookup loaded a direct view and has not yet loaded the file's word)
// "bits-lookup-alim" (LookupSlow found a bit below the view's alim
// unmarked in the active filter and has not yet loaded the file's word)
// and "bits-lookup-flim" (the same below the view's flim, the bit
// unmarked in the active filter and in the sealed tables' union).
// Tests set it before the readers start and clear it
// after they stop.
var testHook func(point string)

// filterHook, on in tests only, makes every view published while it is on
// take LookupSlow's branch past alim and flim (publish sets both to 0), where
// the "bits-filter" hook is called: the filter paths below them test no
// hook.
var filterHook atomic.Bool
