package raftkv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// identity is what a data directory belongs to, kept in the file IDENTITY
// beside the log store so that it is checked before anything in the
// directory is opened for writing (a refused Open changes nothing):
//
//	kvraft data directory
//	cluster <16 hex digits: 0 while a joining node has not heard from its cluster>
//	node <decimal raft ID>
//	token <cluster token>
//
// It is written whole to a temporary file, synced and renamed into place.
type identity struct {
	cluster uint64
	node    uint64
	token   string
}

const (
	identityFile  = "IDENTITY"
	identityTitle = "kvraft data directory"
)

func (id identity) encode() []byte {
	return fmt.Appendf(nil, "%s\ncluster %016x\nnode %d\ntoken %s\n", identityTitle, id.cluster, id.node, id.token)
}

func decodeIdentity(b []byte) (identity, error) {
	var id identity
	sc := bufio.NewScanner(bytes.NewReader(b))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	bad := func(why string) (identity, error) {
		return identity{}, fmt.Errorf("%w: %s: %s", ErrCorrupt, identityFile, why)
	}
	if len(lines) != 4 || lines[0] != identityTitle {
		return bad("not a kvraft identity")
	}
	c, ok := strings.CutPrefix(lines[1], "cluster ")
	if !ok {
		return bad("no cluster line")
	}
	var err error
	if id.cluster, err = strconv.ParseUint(c, 16, 64); err != nil {
		return bad("bad cluster ID")
	}
	nd, ok := strings.CutPrefix(lines[2], "node ")
	if !ok {
		return bad("no node line")
	}
	if id.node, err = strconv.ParseUint(nd, 10, 64); err != nil || id.node == 0 {
		return bad("bad node ID")
	}
	if id.token, ok = strings.CutPrefix(lines[3], "token "); !ok {
		return bad("no token line")
	}
	return id, nil
}

// readIdentity returns the identity of dir, ok = false if it has none.
func readIdentity(dir string) (identity, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("raftkv: %w", err)
	}
	id, err := decodeIdentity(b)
	return id, err == nil, err
}

// writeIdentity records dir's identity durably.
func writeIdentity(dir string, id identity) error {
	tmp := filepath.Join(dir, identityFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("raftkv: %w", err)
	}
	_, err = f.Write(id.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, identityFile))
	}
	if err == nil {
		err = fsutil.SyncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("raftkv: write %s: %w", identityFile, err)
	}
	return nil
}
