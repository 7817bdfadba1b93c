package dochost

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// record is one op of the host's log: a document put or delete.
type record struct {
	op     uint64
	delete bool
	id     uint64
	body   []byte
}

// Record framing: length (4 bytes, of what follows the checksum), CRC-32C of
// the payload (4 bytes), then the payload: op (8), kind (1: 0 put, 1
// delete), id (8), body. All big-endian. A torn or garbled tail (a crash
// mid-append) ends the log at the last whole record.
const recordHeader = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (r record) appendTo(b []byte) []byte {
	n := 17 + len(r.body)
	start := len(b)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, 0) // checksum, below
	b = binary.BigEndian.AppendUint64(b, r.op)
	kind := byte(0)
	if r.delete {
		kind = 1
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, r.id)
	b = append(b, r.body...)
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+recordHeader:], castagnoli))
	return b
}

// readLog reads the whole records of the log at path, in order, and the
// length of the valid prefix. A missing log is empty.
func readLog(path string) ([]record, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var recs []record
	var valid int64
	hdr := make([]byte, recordHeader)
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return recs, valid, nil // end, or a torn header
		}
		n := binary.BigEndian.Uint32(hdr)
		if n < 17 || n > maxBody+17 {
			return recs, valid, nil
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return recs, valid, nil
		}
		if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(hdr[4:]) {
			return recs, valid, nil
		}
		r := record{op: binary.BigEndian.Uint64(p), delete: p[8] == 1, id: binary.BigEndian.Uint64(p[9:]), body: p[17:]}
		if len(recs) > 0 && r.op <= recs[len(recs)-1].op {
			return nil, 0, fmt.Errorf("dochost: %s: op %d after op %d", path, r.op, recs[len(recs)-1].op)
		}
		recs = append(recs, r)
		valid += int64(recordHeader + n)
	}
}

// oplog is the host's append-only log with group commit: appends are
// written at once (so a process crash keeps them: they are in the page
// cache) and made durable by one syncer goroutine, one fsync for every
// append that arrived meanwhile.
type oplog struct {
	path string

	// fileMu is held by the syncer while it syncs, and by compact and
	// close, so that the file is never swapped or closed under a sync.
	fileMu sync.Mutex

	mu      sync.Mutex // guards the fields below; appends hold it
	f       *os.File
	written uint64 // highest op written
	durable uint64 // highest op fsynced
	synced  *sync.Cond
	err     error // a failed write or sync: the log refuses everything after
	closed  bool
	kick    chan struct{}
	done    chan struct{}
	buf     []byte

	onDurable func(op uint64) // called by the syncer after each fsync
}

// openLog opens (creating) the log at path, cutting a torn tail, and
// starts its syncer.
func openLog(path string, valid int64, last uint64, onDurable func(uint64)) (*oplog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(valid); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(valid, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	l := &oplog{path: path, f: f, written: last, durable: last, kick: make(chan struct{}, 1), done: make(chan struct{}), onDurable: onDurable}
	l.synced = sync.NewCond(&l.mu)
	go l.syncLoop()
	return l, nil
}

// appendLocked writes r (whose op is above every op written). l.mu held.
func (l *oplog) appendLocked(r record) error {
	if l.err != nil {
		return l.err
	}
	if l.closed {
		return ErrClosed
	}
	l.buf = r.appendTo(l.buf[:0])
	if _, err := l.f.Write(l.buf); err != nil {
		l.err = fmt.Errorf("dochost: append op %d to %s: %w", r.op, l.path, err)
		return l.err
	}
	l.written = r.op
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return nil
}

// waitDurable blocks until op is durable in the log.
func (l *oplog) waitDurable(op uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable < op && l.err == nil && !l.closed {
		l.synced.Wait()
	}
	if l.durable >= op {
		return nil
	}
	if l.err != nil {
		return l.err
	}
	return ErrClosed
}

func (l *oplog) syncLoop() {
	defer close(l.done)
	for range l.kick {
		l.fileMu.Lock()
		l.mu.Lock()
		target, f, stop := l.written, l.f, l.closed
		due := target > l.durable
		l.mu.Unlock()
		if due && !stop {
			err := f.Sync()
			l.mu.Lock()
			if err != nil && l.err == nil {
				l.err = fmt.Errorf("dochost: sync %s: %w", l.path, err)
			}
			if err == nil && target > l.durable {
				l.durable = target
			}
			l.synced.Broadcast()
			l.mu.Unlock()
			if err == nil && l.onDurable != nil {
				l.onDurable(target)
			}
		}
		l.fileMu.Unlock()
	}
}

// compact rewrites the log without the records at or below upTo (durable
// in the engine), atomically: a new file, synced, renamed over the log.
// Appends wait meanwhile.
func (l *oplog) compact(upTo uint64) (kept int, err error) {
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.closed {
		return 0, l.err
	}
	recs, _, err := readLog(l.path)
	if err != nil {
		return 0, err
	}
	tmp := l.path + ".compact"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	var b []byte
	for _, r := range recs {
		if r.op > upTo {
			b = r.appendTo(b)
			kept++
		}
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, l.path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(l.path))
	}
	if err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return 0, err
	}
	// Every record kept was durable in the old file and is in the new
	// one, synced: durable stays as it was.
	l.f.Close()
	l.f = f
	return kept, nil
}

// close stops the syncer after a last sync.
func (l *oplog) close() error {
	l.fileMu.Lock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.fileMu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	err := l.f.Sync()
	l.mu.Lock()
	if err == nil {
		l.durable = l.written
	}
	durable := l.durable
	l.synced.Broadcast()
	l.mu.Unlock()
	l.fileMu.Unlock()
	close(l.kick)
	<-l.done
	if err == nil && l.onDurable != nil {
		l.onDurable(durable)
	}
	return errors.Join(err, l.f.Close())
}
