// Package dochost is an example host database built on a kvbuf engine, the
// way issue 20 asked a database to adopt it: a document store with
// concurrent writers, its own append-only op log with group commit, ops
// completed out of order, crash replay from the engine's watermark, and log
// compaction driven by the watermark.
//
// A Store keeps documents (id -> body) in the keyspace "docs" and a
// "deleted" bitslice (bit id set once the document was deleted) in a kvbuf
// engine in DIR/engine, and logs every op in DIR/oplog. A write:
//
//  1. locks its document (a striped row lock);
//  2. takes the log lock, numbers the op, appends its record to the log
//     (written, not yet synced) and begins the op in the engine
//     (DB.BeginOp: ops begin in log order);
//  3. releases the log lock and applies the op to the engine (a put as
//     two single calls and an EndOp, a delete as one batch): writers run
//     concurrently and end their ops in any order;
//  4. unlocks its document and waits until the log is durable up to its
//     op (one fsync for every writer waiting: group commit), then
//     acknowledges.
//
// The row lock is what makes out-of-order completion correct: ops that
// write the same document are logged and applied in the same order, so
// the engine's state is always the log's, applied in order, for every op
// the watermark covers (and replay fixes the rest). Without it, two
// writers of one document could log ops 7 and 8 and apply 8 first: the
// engine would keep 7's write while the log says 8 won, and no replay
// would repair it once the watermark covers both (the crash test caught
// exactly that).
//
// The engine runs with Options.LogBeforeData, and the log's syncer reports
// each durable position with DB.LogDurable, so the watermark is never ahead
// of the log. Open replays the whole log into the engine in order: ops at
// or below the watermark are skipped by the engine (redelivered ops), the
// rest are applied, which makes whole again any op a crash left half
// flushed. A compactor goroutine, woken by DB.WaitWatermark, drops the log
// records the watermark covers.
//
// # Caveats
//
//   - A write reaches the engine before its log record is durable (a
//     process crash keeps both, as both are in the page cache). After a
//     power loss the engine may hold writes of an op whose log record was
//     lost: never acknowledged, they stay visible. A host that must not
//     show them applies an op to the engine only once its record is
//     durable, as a raft state machine applies committed entries.
//   - It is an example: no snapshots, no reads at a log position.
package dochost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kvbuf/kvbuf"
)

// maxBody is the largest document body.
const maxBody = 1 << 16

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("dochost: closed")

// Options configures Open. A nil *Options means defaults.
type Options struct {
	// Engine is passed to kvbuf.Open; LogBeforeData is always set. Nil:
	// the engine's defaults.
	Engine *kvbuf.Options
	// CompactAbove is the number of log records the watermark covers
	// that triggers a compaction of the log. Default 1000; negative
	// disables compaction.
	CompactAbove int
}

// Store is an open document store. Its methods are safe for concurrent use.
type Store struct {
	db      *kvbuf.DB
	docs    *kvbuf.KV
	deleted *kvbuf.Bits
	log     *oplog

	rows [64]sync.Mutex // row locks, by document id modulo 64

	mu   sync.Mutex // the log lock: numbers ops, appends, begins them
	next uint64

	// Replayed counts the log records Open applied; Skipped those the
	// engine skipped as redelivered (at or below its watermark).
	Replayed, Skipped int64

	compactAbove int
	stopCompact  context.CancelFunc
	compactDone  chan struct{}
	compactions  int // under log.mu

	// journal, nil outside the crash test, is called with each record
	// after it is logged and before its op is begun (under the log lock).
	journal func(record)
}

// Open opens (creating) the store in dir and replays its log.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.CompactAbove == 0 {
		o.CompactAbove = 1000
	}
	var eo kvbuf.Options
	if o.Engine != nil {
		eo = *o.Engine
	}
	eo.LogBeforeData = true
	db, err := kvbuf.Open(filepath.Join(dir, "engine"), &eo)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, compactAbove: o.CompactAbove}
	if err := s.recover(dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopCompact, s.compactDone = cancel, make(chan struct{})
	go s.compactor(ctx)
	return s, nil
}

// recover replays the log into the engine and opens it for appends.
func (s *Store) recover(dir string) error {
	var err error
	if s.docs, err = s.db.KV("docs"); err != nil {
		return err
	}
	if s.deleted, err = s.db.Bits("deleted"); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "oplog")
	recs, valid, err := readLog(path)
	if err != nil {
		return err
	}
	var last uint64
	before := s.db.Metrics().Redelivered
	for _, r := range recs {
		// In log order, one op at a time: those at or below the
		// watermark are skipped by the engine.
		if err := s.apply(context.Background(), r, true); err != nil {
			return fmt.Errorf("dochost: replay op %d: %w", r.op, err)
		}
		last = r.op
	}
	s.Replayed = int64(len(recs))
	s.Skipped = s.db.Metrics().Redelivered - before
	// The whole log is durable now (openLog syncs it): the watermark may
	// cover all of it.
	if s.log, err = openLog(path, valid, last, s.db.LogDurable); err != nil {
		return err
	}
	s.db.LogDurable(last)
	s.next = max(last, s.db.Watermark()) + 1
	return nil
}

func docKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// apply writes r to the engine. A replayed op is one batch; a live put is
// two single calls and an EndOp, a live delete one batch (which ends its
// op).
func (s *Store) apply(ctx context.Context, r record, replay bool) error {
	if r.delete || replay {
		return s.db.Update(ctx, r.op, func(b *kvbuf.Batch) error {
			if r.delete {
				b.Delete(s.docs, docKey(r.id))
			} else {
				b.Put(s.docs, docKey(r.id), r.body)
			}
			b.Set(s.deleted, r.id, r.delete)
			return nil
		})
	}
	if err := s.docs.Put(ctx, docKey(r.id), r.body, r.op); err != nil {
		return err
	}
	if err := s.deleted.Set(ctx, r.id, false, r.op); err != nil {
		return err
	}
	return s.db.EndOp(ctx, r.op)
}

// Put stores body as document id and returns its op once it is durable in
// the log.
func (s *Store) Put(ctx context.Context, id uint64, body []byte) (uint64, error) {
	if len(body) > maxBody {
		return 0, fmt.Errorf("dochost: document %d: body of %d bytes (max %d)", id, len(body), maxBody)
	}
	return s.write(ctx, id, func(uint64) record { return record{id: id, body: body} })
}

// putOp is Put with a body made from the op number (the crash test's
// bodies name their op).
func (s *Store) putOp(ctx context.Context, id uint64, body func(id, op uint64) []byte) (uint64, error) {
	return s.write(ctx, id, func(op uint64) record { return record{id: id, body: body(id, op)} })
}

// Delete deletes document id and returns its op once it is durable in the
// log.
func (s *Store) Delete(ctx context.Context, id uint64) (uint64, error) {
	return s.write(ctx, id, func(uint64) record { return record{id: id, delete: true} })
}

// write logs the record mk makes for the next op, applies it to the engine and waits for the log. ctx is
// checked before the op is logged only: a logged op is applied whatever
// happens to the caller, or the engine would hold it open (its watermark
// stuck below it) until a restart replays it.
func (s *Store) write(ctx context.Context, id uint64, mk func(op uint64) record) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	row := &s.rows[id%uint64(len(s.rows))]
	row.Lock()
	op, err := s.logAndApply(mk)
	row.Unlock()
	if err != nil {
		return 0, err
	}
	if err := s.log.waitDurable(op); err != nil {
		return 0, err
	}
	return op, nil
}

// logAndApply logs the record mk makes and applies it; the row lock is
// held.
func (s *Store) logAndApply(mk func(op uint64) record) (uint64, error) {
	s.mu.Lock()
	r := mk(s.next)
	r.op = s.next
	s.log.mu.Lock()
	err := s.log.appendLocked(r)
	s.log.mu.Unlock()
	if err == nil {
		if s.journal != nil {
			s.journal(r)
		}
		s.next++
		// In log order, under the log lock: the engine keeps the op open
		// until this writer ends it, however many later ops end first.
		err = s.db.BeginOp(context.Background(), r.op)
	}
	s.mu.Unlock()
	if err != nil {
		// Logged but not begun only if the engine is closing: no later
		// op begins either, so no watermark covers it, and Open
		// replays it. Nothing was acknowledged.
		return 0, err
	}
	if err := s.apply(context.Background(), r, false); err != nil {
		return 0, err
	}
	return r.op, nil
}

// Get returns document id's body, or ok = false if it does not exist.
func (s *Store) Get(id uint64) (body []byte, ok bool, err error) {
	body, err = s.docs.Get(docKey(id))
	if errors.Is(err, kvbuf.ErrNotFound) {
		return nil, false, nil
	}
	return body, err == nil, err
}

// Deleted reports whether document id was deleted (and not put since).
func (s *Store) Deleted(id uint64) (bool, error) { return s.deleted.Get(id) }

// DB returns the engine, for tests and metrics.
func (s *Store) DB() *kvbuf.DB { return s.db }

// Compactions returns the number of log compactions so far.
func (s *Store) Compactions() int {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.compactions
}

// compactor drops the log records the watermark covers, woken by the
// engine when the watermark advances (no polling).
func (s *Store) compactor(ctx context.Context) {
	defer close(s.compactDone)
	if s.compactAbove < 0 {
		return
	}
	var wm, done uint64
	for {
		next, err := s.db.WaitWatermark(ctx, wm)
		if err != nil {
			return // Close
		}
		wm = next
		if wm-done < uint64(s.compactAbove) {
			continue
		}
		if _, err := s.log.compact(wm); err != nil {
			return // the log reports the failure to the next writer
		}
		s.log.mu.Lock()
		s.compactions++
		s.log.mu.Unlock()
		done = wm
	}
}

// Close stops the compactor, syncs the log and closes the engine, whose
// final flush covers every op that ended. Call it once the writers have
// returned.
func (s *Store) Close() error {
	s.stopCompact()
	<-s.compactDone
	lerr := s.log.close()
	return errors.Join(lerr, s.db.Close())
}
