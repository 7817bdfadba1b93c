//go:build !linux

package main

// fsType names the file system dir lives on; only Linux is supported.
func fsType(string) string { return "unknown file system" }
