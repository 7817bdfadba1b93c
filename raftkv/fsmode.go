package raftkv

import (
	"fmt"
	"os"
)

// File modes. A node's data directory holds its data, its raft log and its
// identity: like etcd's, it is private to its owner by default
// (Options.DirMode 0700: directories 0700, files 0600). The node creates
// its directories with DirMode and its files with DirMode less the execute
// bits, the log store's (pebble's, through fsutil.ModeFS) included; the
// engine directories are the engine's (kvbuf creates them 0700, its files
// 0600). Open warns about an existing
// data directory open to more than DirMode, and changes nothing.

// DefaultDirMode is Options.DirMode's default.
const DefaultDirMode os.FileMode = 0o700

// fileMode is the mode of the files of a directory of mode dir.
func fileMode(dir os.FileMode) os.FileMode { return dir &^ 0o111 }

// checkDirMode warns if dir is open to more than mode (etcd does too).
func (n *Node) checkDirMode(dir string, mode os.FileMode) {
	st, err := os.Stat(dir)
	if err != nil {
		return
	}
	if extra := st.Mode().Perm() &^ mode; extra != 0 {
		n.log.Warn("raftkv: the data directory is open to more than its mode (chmod it to keep its data private)",
			"dir", dir, "mode", fmt.Sprintf("%#o", st.Mode().Perm()), "want", fmt.Sprintf("%#o", mode))
	}
}
