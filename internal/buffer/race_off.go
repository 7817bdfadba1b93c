//go:build !race

package buffer

// raceBuild reports whether the package is built with -race.
const raceBuild = false
