//go:build !race

package buffer

// raceEnabled: see race_on_test.go.
const raceEnabled = false
