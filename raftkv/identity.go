package raftkv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// identity is what a data directory belongs to, kept in the file IDENTITY
// beside the log store so that it is checked before anything in the
// directory is opened for writing (a refused Open changes nothing):
//
//	kvraft data directory
//	cluster <16 hex digits: the cluster ID; 0 until the cluster's first leader assigns it>
//	bootstrap <16 hex digits: the bootstrap hash; 0 while a joining node has not heard from its cluster>
//	node <decimal raft ID>
//	incarnation <16 hex digits: random, made with the directory>
//	token <cluster token>
//
// The cluster ID is random: the first leader of a new cluster proposes one
// and every node records it when it applies the entry (a new cluster from
// the same flags gets another). Until then nodes know their cluster by the
// bootstrap hash, derived from the token and the initial members. The
// incarnation tells this directory from another one for the same node ID:
// the cluster records each node's (see membership), and refuses a node
// whose directory was wiped or replaced, whose log and votes it can no
// longer count on.
//
// The file is written whole to a temporary file, synced and renamed into
// place. The first format (four lines: no bootstrap and incarnation lines,
// a cluster ID derived like today's bootstrap hash) is read too, and
// rewritten in this one at Open.
type identity struct {
	cluster     uint64
	bootstrap   uint64
	node        uint64
	incarnation uint64
	token       string
}

const (
	identityFile  = "IDENTITY"
	identityTitle = "kvraft data directory"
)

func (id identity) encode() []byte {
	return fmt.Appendf(nil, "%s\ncluster %016x\nbootstrap %016x\nnode %d\nincarnation %016x\ntoken %s\n",
		identityTitle, id.cluster, id.bootstrap, id.node, id.incarnation, id.token)
}

func decodeIdentity(b []byte) (identity, error) {
	var id identity
	sc := bufio.NewScanner(bytes.NewReader(b))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	bad := func(why string) (identity, error) {
		return identity{}, errorf("%s: %s: %w", identityFile, why, ErrCorruptLog)
	}
	if len(lines) == 0 || lines[0] != identityTitle {
		return bad("not a kvraft identity")
	}
	hex := func(line, key string) (uint64, bool) {
		v, ok := strings.CutPrefix(line, key+" ")
		if !ok {
			return 0, false
		}
		u, err := strconv.ParseUint(v, 16, 64)
		return u, err == nil
	}
	var ok bool
	if id.cluster, ok = hex(lines[1%len(lines)], "cluster"); !ok {
		return bad("no cluster line")
	}
	switch len(lines) {
	case 4: // the first format
		id.bootstrap = id.cluster
		lines = []string{lines[0], lines[1], "", lines[2], "", lines[3]}
	case 6:
		if id.bootstrap, ok = hex(lines[2], "bootstrap"); !ok {
			return bad("no bootstrap line")
		}
		if id.incarnation, ok = hex(lines[4], "incarnation"); !ok {
			return bad("no incarnation line")
		}
	default:
		return bad(fmt.Sprintf("%d lines", len(lines)))
	}
	nd, ok := strings.CutPrefix(lines[3], "node ")
	if !ok {
		return bad("no node line")
	}
	var err error
	if id.node, err = strconv.ParseUint(nd, 10, 64); err != nil || id.node == 0 {
		return bad("bad node ID")
	}
	if id.token, ok = strings.CutPrefix(lines[5], "token "); !ok {
		return bad("no token line")
	}
	return id, nil
}

// readIdentity returns the identity of dir on fsys, ok = false if it has
// none.
func readIdentity(fsys vfs.FS, dir string) (identity, bool, error) {
	f, err := fsys.Open(fsys.PathJoin(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, errorf("%w", err)
	}
	b, err := io.ReadAll(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return identity{}, false, errorf("read %s: %w", identityFile, err)
	}
	id, err := decodeIdentity(b)
	return id, err == nil, err
}

// writeIdentity records the identity of the node's directory durably.
func (n *Node) writeIdentity(id identity) error {
	return writeIdentity(n.fs, n.dir, id)
}

// writeIdentity records dir's identity durably on fsys (which gives the
// file its mode: see nodeFS).
func writeIdentity(fsys vfs.FS, dir string, id identity) error {
	tmp := filepath.Join(dir, identityFile+".tmp")
	f, err := fsys.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errorf("%w", err)
	}
	_, err = f.Write(id.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, filepath.Join(dir, identityFile))
	}
	if err == nil {
		err = fsutil.SyncDirWith(fsys.OpenDir, dir)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return errorf("write %s: %w", identityFile, err)
	}
	return nil
}
