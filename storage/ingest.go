package storage

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// IngestDir is the directory, inside the store's, where an Ingest writes its
// sstables until pebble links them into the store. Nothing in it is part of
// the store: Open removes whatever a crash left there, so that a file of an
// ingest that never happened is never adopted.
const IngestDir = "kvbuf-ingest"

// ingester is the store's part of ingestion: where files go and how they
// are written. Set once at Open.
type ingester struct {
	fs  vfs.FS
	dir string // the store's IngestDir
	// po is the store's pebble options with pebble's defaults filled in (as
	// pebble.Open fills them in its own copy): the writer options of every
	// ingested table come from it, so that tables are written in the
	// store's own format, filters and compression.
	po *pebble.Options
	// session names this Store's files apart from any a crash left (Open
	// removes those, but a removal may have failed).
	session string
	seq     atomic.Uint64
	// made is set once the directory exists this session.
	made atomic.Bool
	// split is the size past which an Ingest starts a new sstable at the
	// next keyspace, with the watermark and meta entries in a table of
	// their own; 0 writes one table per ingest. (Both designs are measured
	// in BenchmarkIngestDesign; see doc/design.md, "Flush by ingestion".)
	split uint64
	// format is Options.IngestTableFormat: the table format of ingested
	// tables if below the store's (0: the store's).
	format sstable.TableFormat
}

func newIngester(fsys vfs.FS, storeDir string, po *pebble.Options, split uint64, format sstable.TableFormat) *ingester {
	var b [6]byte
	_, _ = rand.Read(b[:])
	opts := po.Clone()
	opts.EnsureDefaults()
	return &ingester{
		fs:      fsys,
		dir:     fsys.PathJoin(storeDir, IngestDir),
		po:      opts,
		session: hex.EncodeToString(b[:]),
		split:   split,
		format:  format,
	}
}

// removeLeftovers removes the ingest directory and every file in it:
// files of ingests a crash interrupted, which are not part of the store. A
// file pebble ingested is a second link of a store table, so removing it
// removes nothing of the store. The directory is made again by the first
// ingest (so a store that never ingests has none).
func (ig *ingester) removeLeftovers() error {
	if _, err := ig.fs.Stat(ig.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return ig.fs.RemoveAll(ig.dir)
}

// Ingest is a set of changes written straight into sstables in the store's
// own table format (its Bloom filters and compression included), then
// committed atomically with Store.CommitIngest: pebble's DB.Ingest moves the
// tables into the store in one version edit, numbered above every earlier
// commit, so that the changes, the meta entries and the watermark land
// together or not at all. It skips what a Batch costs pebble (the WAL, the
// memtable and the memtable's flush) and is meant for large sorted change
// sets (a flush generation); small ones are cheaper as a Batch (one WAL
// write, no manifest edit, no new table).
//
// An Ingest is built in key order: SetWatermark, SetMeta and DeleteMeta
// first, then the user changes by increasing keyspace ID and, within a
// keyspace, Put and Delete by strictly increasing key (each key once).
// DeleteRange may come in any order among a keyspace's changes, but before
// any change of a later keyspace. Unlike a Batch, where order decides, a
// DeleteRange hides only what was committed before the ingest: the
// ingest's own Puts and Deletes stay, whatever the order they were added
// in (they all carry one sequence number).
//
// An operation that breaks the order, names keyspace 0 or comes after
// CommitIngest is dropped and makes the ingest fail: CommitIngest then
// returns the error and commits nothing. An Ingest is not safe for
// concurrent use. One that is not committed must be Aborted, which removes
// its files.
type Ingest struct {
	s  *Store
	ig *ingester

	wm    uint64
	hasWM bool
	metas []ingestMeta

	started bool // the header (watermark, metas) is written
	w       *sstable.Writer
	path    string   // of w
	paths   []string // finished tables
	created []string // every file made, finished or not (removed on failure)
	// last is the stored form of the last point of w; lastKS the keyspace
	// of the last user change (0 before the first).
	last   []byte
	lastKS KeyspaceID
	dels   []ingestSpan // range deletions for w, any order
	n      int
	keyBuf []byte
	endBuf []byte
	err    error
	done   bool // committed or aborted

	// parts are the ingest's parts not yet joined (see Parts); part is set
	// in a part, first is its first stored key.
	parts []*Ingest
	part  bool
	first []byte
}

type ingestMeta struct {
	name  string
	value []byte
	del   bool
}

type ingestSpan struct{ start, end []byte }

// NewIngest returns an empty Ingest for s. Errors come at CommitIngest.
func (s *Store) NewIngest() *Ingest {
	in := &Ingest{s: s, ig: s.ig}
	if s.ig == nil {
		in.err = kverr.Errorf("ingest into %q: %w", s.dir, kverr.ErrReadOnly)
	}
	return in
}

// SetWatermark records op as the watermark this ingest makes durable.
// Called more than once, the highest value wins. It must come before the
// first user change.
func (in *Ingest) SetWatermark(op uint64) {
	if in.checkHeader("watermark") {
		if !in.hasWM || op > in.wm {
			in.wm = op
		}
		in.hasWM = true
	}
}

// SetMeta sets the named meta entry (see Batch.SetMeta). It must come
// before the first user change.
func (in *Ingest) SetMeta(name string, value []byte) {
	if in.checkHeader(fmt.Sprintf("meta %q", name)) {
		in.metas = append(in.metas, ingestMeta{name: name, value: slices.Clone(value)})
	}
}

// DeleteMeta removes the named meta entry. It must come before the first
// user change.
func (in *Ingest) DeleteMeta(name string) {
	if in.checkHeader(fmt.Sprintf("meta %q", name)) {
		in.metas = append(in.metas, ingestMeta{name: name, del: true})
	}
}

func (in *Ingest) checkHeader(what string) bool {
	switch {
	case in.err != nil:
		return false
	case in.done:
		in.err = kverr.Errorf("ingest: %s after the ingest was committed or aborted: %w", what, kverr.ErrClosed)
		return false
	case in.started:
		in.err = kverr.Errorf("ingest: %s after the first user change: %w", what, kverr.ErrBadRange)
		return false
	}
	return true
}

// Len returns the number of operations added (the watermark not counted).
func (in *Ingest) Len() int { return in.n + len(in.metas) }

// Put sets key to value in keyspace ks. See Ingest for the order.
func (in *Ingest) Put(ks KeyspaceID, key, value []byte) {
	if k := in.point(ks, key); k != nil {
		if err := in.w.Set(k, value); err != nil {
			in.fail(err)
		}
	}
}

// Delete removes key from keyspace ks. See Ingest for the order.
func (in *Ingest) Delete(ks KeyspaceID, key []byte) {
	if k := in.point(ks, key); k != nil {
		if err := in.w.Delete(k); err != nil {
			in.fail(err)
		}
	}
}

// DeleteRange removes every key k of keyspace ks with lower <= k < upper
// that was committed before the ingest (nil bounds: the start or end of
// the keyspace, as Batch.DeleteRange). An empty range adds nothing.
func (in *Ingest) DeleteRange(ks KeyspaceID, lower, upper []byte) {
	if !in.user(ks, lower, upper, true) {
		return
	}
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return
	}
	start := appendUserKey(nil, ks, lower)
	var end []byte
	if upper != nil {
		end = appendUserKey(nil, ks, upper)
	} else {
		end = keyspaceEnd(nil, ks)
	}
	in.dels = append(in.dels, ingestSpan{start, end})
	in.n++
}

// point checks and prepares a point change; it returns the stored key
// (valid until the next call) or nil if the change is dropped.
func (in *Ingest) point(ks KeyspaceID, key []byte) []byte {
	if !in.user(ks, key, nil, false) {
		return nil
	}
	in.keyBuf = appendUserKey(in.keyBuf[:0], ks, key)
	if in.last != nil && bytes.Compare(in.keyBuf, in.last) <= 0 {
		in.err = kverr.Errorf("ingest: keyspace %d key %q not above the previous key: %w", ks, string(key), kverr.ErrBadRange)
		return nil
	}
	if in.part && in.first == nil {
		in.first = slices.Clone(in.keyBuf)
	}
	in.last = append(in.last[:0], in.keyBuf...)
	in.n++
	return in.keyBuf
}

// user checks a user change of keyspace ks (key, or the range [key, hi)
// for a range deletion: what an error names), writes the header first and
// moves to a new table when the keyspace changes and the current one is
// large enough.
func (in *Ingest) user(ks KeyspaceID, key, hi []byte, isRange bool) bool {
	in.joinParts()
	switch {
	case in.err != nil:
		return false
	case in.part && isRange:
		in.err = kverr.Errorf("ingest: %s in a part of an ingest: %w", describe(key, hi, isRange), kverr.ErrBadRange)
		return false
	case in.done:
		in.err = kverr.Errorf("ingest: %s after the ingest was committed or aborted: %w", describe(key, hi, isRange), kverr.ErrClosed)
		return false
	case ks == 0:
		in.err = errKeyspace("ingest: " + describe(key, hi, isRange))
		return false
	case ks < in.lastKS:
		in.err = kverr.Errorf("ingest: %s of keyspace %d after keyspace %d: %w", describe(key, hi, isRange), ks, in.lastKS, kverr.ErrBadRange)
		return false
	}
	if !in.started {
		in.started = true
		if err := in.writeHeader(); err != nil {
			in.fail(err)
			return false
		}
	}
	if ks != in.lastKS && in.w != nil && in.ig.split > 0 && in.w.Raw().EstimatedSize() >= in.ig.split {
		if err := in.finishTable(); err != nil {
			in.fail(err)
			return false
		}
	}
	in.lastKS = ks
	if in.w == nil {
		if err := in.newTable(); err != nil {
			in.fail(err)
			return false
		}
	}
	return true
}

// describe names a change in an error.
func describe(key, hi []byte, isRange bool) string {
	if isRange {
		return fmt.Sprintf("range deletion [%q, %q)", string(key), string(hi))
	}
	return fmt.Sprintf("key %q", string(key))
}

func (in *Ingest) fail(err error) {
	if in.err == nil {
		in.err = kverr.Errorf("ingest into %q: %w", in.s.dir, err)
	}
}

// writeHeader writes the watermark and the meta entries: into a table of
// their own when tables are split, else at the start of the first table.
func (in *Ingest) writeHeader() error {
	if !in.hasWM && len(in.metas) == 0 {
		return nil
	}
	if err := in.newTable(); err != nil {
		return err
	}
	if in.hasWM {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], in.wm)
		if err := in.w.Set([]byte(watermarkKey), v[:]); err != nil {
			return err
		}
	}
	// The last change of a name wins, as in a Batch; the table wants each
	// key once, in order.
	slices.SortStableFunc(in.metas, func(a, b ingestMeta) int { return strings.Compare(a.name, b.name) })
	for i, m := range in.metas {
		if i+1 < len(in.metas) && in.metas[i+1].name == m.name {
			continue
		}
		k := appendMetaKey(nil, m.name)
		var err error
		if m.del {
			err = in.w.Delete(k)
		} else {
			err = in.w.Set(k, m.value)
		}
		if err != nil {
			return err
		}
	}
	if in.ig.split > 0 {
		return in.finishTable()
	}
	return nil
}

// newTable starts the next sstable.
func (in *Ingest) newTable() error {
	ig := in.ig
	if !ig.made.Load() {
		if err := ig.fs.MkdirAll(ig.dir, 0o755); err != nil {
			return err
		}
		ig.made.Store(true)
	}
	path := ig.fs.PathJoin(ig.dir, fmt.Sprintf("%s-%06d.sst", ig.session, ig.seq.Add(1)))
	f, err := ig.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	in.created = append(in.created, path)
	in.s.mu.RLock()
	var format sstable.TableFormat
	if !in.s.closed {
		format = in.s.db.TableFormat()
	}
	in.s.mu.RUnlock()
	if format == 0 {
		_ = f.Close()
		return kverr.ErrClosed
	}
	if ig.format != 0 && ig.format < format {
		format = ig.format
	}
	in.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), ig.po.MakeWriterOptions(0, format))
	in.path = path
	return nil
}

// finishTable writes the current table's range deletions (fragmented: the
// writer wants them sorted and apart; they all carry one sequence number,
// so their union is the same deletion) and finishes it: the file is synced
// and closed.
func (in *Ingest) finishTable() error {
	w := in.w
	in.w = nil
	slices.SortFunc(in.dels, func(a, b ingestSpan) int { return bytes.Compare(a.start, b.start) })
	for i := 0; i < len(in.dels); {
		start, end := in.dels[i].start, in.dels[i].end
		j := i + 1
		for ; j < len(in.dels) && bytes.Compare(in.dels[j].start, end) <= 0; j++ {
			if bytes.Compare(in.dels[j].end, end) > 0 {
				end = in.dels[j].end
			}
		}
		if err := w.DeleteRange(start, end); err != nil {
			_ = w.Close()
			return err
		}
		i = j
	}
	in.dels = in.dels[:0]
	if err := failpoint.Hit(failpoint.StorageIngestSync); err != nil {
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil { // syncs and closes the file
		return err
	}
	in.paths = append(in.paths, in.path)
	return nil
}

// Parts returns n parts of the ingest, each writing its own sstable, so
// that n goroutines can write one large sorted change set at once (each
// part is used by one goroutine; BenchmarkIngestTo measured it). The
// ingest's table so far is finished first. Part i takes Put and Delete
// (no DeleteRange) in key order like the ingest, of keys above every key
// of part i-1, itself above everything added to the ingest before Parts:
// the tables must not overlap, and they all land in the one version edit
// of CommitIngest (atomic, with the watermark). The next use of the
// ingest (a change, Parts, CommitIngest, Abort) joins the parts: the
// caller must have stopped using them by then. A change added to the
// ingest after the join must be above every part's keys. An error of a
// part, or parts out of order, fails the ingest (CommitIngest returns it
// and commits nothing).
func (in *Ingest) Parts(n int) []*Ingest {
	in.joinParts()
	if in.err == nil && in.part {
		in.err = kverr.Errorf("ingest: parts of a part: %w", kverr.ErrBadRange)
	}
	if in.err == nil && in.done {
		in.err = kverr.Errorf("ingest: parts after the ingest was committed or aborted: %w", kverr.ErrClosed)
	}
	in.finishWritten()
	parts := make([]*Ingest, n)
	for i := range parts {
		parts[i] = &Ingest{s: in.s, ig: in.ig, started: true, part: true, lastKS: in.lastKS, last: slices.Clone(in.last), err: in.err}
	}
	in.parts = parts
	return parts
}

// Done finishes a part's table (written and synced) on the calling
// goroutine, so that parts written at once also finish at once; a part's
// writer calls it after its last change (the join finishes a part whose
// writer did not). It is a no-op on an ingest that is not a part.
func (in *Ingest) Done() {
	if in.part && in.w != nil && in.err == nil {
		if err := in.finishTable(); err != nil {
			in.fail(err)
		}
	}
}

// joinParts takes the parts' tables into the ingest, checking that they
// are in order (see Parts).
func (in *Ingest) joinParts() {
	if len(in.parts) == 0 {
		return
	}
	parts := in.parts
	in.parts = nil
	for _, p := range parts {
		if p.w != nil && p.err == nil {
			if err := p.finishTable(); err != nil {
				p.fail(err)
			}
		}
		if p.w != nil { // failed with its table open
			_ = p.w.Close()
			p.w = nil
		}
		in.created = append(in.created, p.created...)
		in.n += p.n
		if in.err != nil {
			continue
		}
		switch {
		case p.err != nil:
			in.err = p.err
		case p.first == nil:
			// empty part
		case in.last != nil && bytes.Compare(p.first, in.last) <= 0:
			in.err = kverr.Errorf("ingest: a part's first key %q not above the previous part's last %q: %w", p.first, in.last, kverr.ErrBadRange)
		default:
			in.paths = append(in.paths, p.paths...)
			in.last = append(in.last[:0], p.last...)
			in.lastKS = max(in.lastKS, p.lastKS)
		}
	}
}

// finishWritten writes the header of an ingest that wrote nothing yet and
// finishes the table being written, recording the first failure in in.err.
func (in *Ingest) finishWritten() {
	if in.err == nil && !in.started {
		in.started = true
		in.err = in.writeHeader()
	}
	if in.err == nil && in.w != nil {
		if err := in.finishTable(); err != nil {
			in.fail(err)
		}
	}
}

// finish finishes the table being written; the ingest is then ready to be
// handed to pebble.
func (in *Ingest) finish() error {
	in.joinParts()
	in.finishWritten()
	return in.err
}

// Abort drops an ingest that will not be committed: it removes its files.
// It is a no-op after CommitIngest (which removes them itself).
func (in *Ingest) Abort() {
	if in.done {
		return
	}
	in.joinParts() // their files are removed with the ingest's
	in.done = true
	if in.w != nil {
		_ = in.w.Close()
		in.w = nil
	}
	in.removeFiles()
}

// removeFiles removes every file the ingest made (best effort: Open
// removes what is left).
func (in *Ingest) removeFiles() {
	if in.ig == nil {
		return
	}
	for _, p := range in.created {
		_ = in.ig.fs.Remove(p)
	}
	in.created, in.paths = nil, nil
}
