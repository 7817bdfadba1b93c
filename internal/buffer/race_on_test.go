//go:build race

package buffer

// raceEnabled reports a -race build: the race detector allocates, so
// allocation counts are not checked.
const raceEnabled = true
