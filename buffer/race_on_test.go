//go:build race

package buffer

// raceEnabled: the race detector slows every memory access several times
// over, so stress tests scale their iteration counts down under it.
const raceEnabled = true
