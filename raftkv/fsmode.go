package raftkv

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// File modes. A node's data directory holds its data, its raft log and its
// identity: like etcd's, it is private to its owner by default
// (Options.DirMode 0700: directories 0700, files 0600). The node creates
// its directories with DirMode and its files with DirMode less the execute
// bits, the log store's (pebble's) included; the engine directories are
// the engine's (kvbuf creates them 0700). Open warns about an existing
// data directory open to more than DirMode, and changes nothing.

// DefaultDirMode is Options.DirMode's default.
const DefaultDirMode os.FileMode = 0o700

// fileMode is the mode of the files of a directory of mode dir.
func fileMode(dir os.FileMode) os.FileMode { return dir &^ 0o111 }

// privateFS is pebble's file system with the node's modes: pebble creates
// files 0666 and directories as asked, less the umask; each file it
// creates is set to the file mode before anything is written to it.
type privateFS struct {
	vfs.FS
	dir, file os.FileMode
}

func newPrivateFS(dirMode os.FileMode) vfs.FS {
	return privateFS{FS: vfs.Default, dir: dirMode, file: fileMode(dirMode)}
}

func (p privateFS) chmod(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	if err := os.Chmod(name, p.file); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftkv: chmod %s: %w", name, err)
	}
	return f, nil
}

// Create implements vfs.FS.
func (p privateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.Create(name, category)
	return p.chmod(name, f, err)
}

// OpenReadWrite implements vfs.FS (it creates a missing file).
func (p privateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := p.FS.OpenReadWrite(name, category, opts...)
	return p.chmod(name, f, err)
}

// ReuseForWrite implements vfs.FS (a recycled log file keeps its mode, set
// when it was created; set again in case it predates the option).
func (p privateFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.ReuseForWrite(oldname, newname, category)
	return p.chmod(newname, f, err)
}

// MkdirAll implements vfs.FS.
func (p privateFS) MkdirAll(dir string, _ os.FileMode) error { return p.FS.MkdirAll(dir, p.dir) }

// Lock implements vfs.FS.
func (p privateFS) Lock(name string) (io.Closer, error) {
	c, err := p.FS.Lock(name)
	if err == nil {
		if err := os.Chmod(name, p.file); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("raftkv: chmod %s: %w", name, err)
		}
	}
	return c, err
}

// Unwrap implements vfs.FS.
func (p privateFS) Unwrap() vfs.FS { return p.FS }

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
