package ycsb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// Errors. Each is a sentinel to test with errors.Is; the errors the
// bindings return wrap them with the table and key involved.
var (
	// ErrNotFound is returned by Read, Update and BatchUpdate for a record
	// that does not exist (YCSB's NOT_FOUND status).
	ErrNotFound = errors.New("ycsb: record not found")

	// ErrUnknownField is returned for a field name the table does not have
	// (the table has fields field0 .. field<fieldcount-1>).
	ErrUnknownField = errors.New("ycsb: unknown field")

	// ErrCorruptRow is returned when a stored record does not decode.
	ErrCorruptRow = errors.New("ycsb: corrupt record")

	// ErrBadProperty is returned for a property out of range or that does
	// not parse, and for an unknown engine or workload name.
	ErrBadProperty = errors.New("ycsb: bad property")

	// ErrBadKey is returned for an empty record key or table name.
	ErrBadKey = errors.New("ycsb: bad key")
)

// engine is what a binding implements; DB does the rest (rows, fields,
// per-thread buffers) the same way for every engine. Keys reach an engine
// as a table and the record key; rows are encoded records. An engine must
// not keep key, row or value slices after a call returns.
type engine interface {
	// get appends the row of key to dst (found false: dst unchanged).
	get(t *thread, table string, key []byte, dst []byte) (row []byte, found bool, err error)
	// getMany sets rows[i] to the row of keys[i] (nil if absent), appending
	// the rows to buf; it returns the extended buf.
	getMany(t *thread, table string, keys [][]byte, rows [][]byte, buf []byte) ([]byte, error)
	// put writes key = row.
	put(ctx context.Context, t *thread, table string, key, row []byte) error
	// putMany writes keys[i] = rows[i] for every i as one batch.
	putMany(ctx context.Context, t *thread, table string, keys, rows [][]byte) error
	// update reads key's row, calls merge(old, dst) and writes the row it
	// returns; found is false (and nothing written) if key is absent.
	update(ctx context.Context, t *thread, table string, key []byte, merge mergeFunc) (found bool, err error)
	// delete removes the keys (absent keys are not an error), as one batch.
	delete(ctx context.Context, t *thread, table string, keys [][]byte) error
	// scan calls fn for up to count records from start in key order, within
	// table; fn's slices are valid during the call.
	scan(t *thread, table string, start []byte, count int, fn func(key, row []byte) error) error
	// durable makes every write that returned so far durable (the end of
	// a load, timed).
	durable(ctx context.Context) error
	// close makes every write durable and closes the engine.
	close() error
}

// mergeFunc appends to dst the new row made from old (the stored row).
type mergeFunc func(old, dst []byte) ([]byte, error)

// flushWatcher is implemented by engines that can tell whether a flush
// (kvbuf: a generation being written; pebble: a memtable flush) is in
// progress, so that reads during one are timed apart.
type flushWatcher interface {
	flushing() bool
}

// idler is implemented by engines whose background work (flushes and
// compactions) the suite can wait out: waitIdle returns once none is
// running or pending, or ctx's error. The suite waits after the load and
// after each warm-up and measured run, off the clock, so that each one's
// disk figure counts the background work it caused and none that it
// inherited (doc/workloads.md, "Disk writes per user byte"). An engine
// that does not implement it (badger: no reliable way to tell) gets no
// disk figure.
type idler interface {
	waitIdle(ctx context.Context) error
}

// storeCounter is implemented by engines over an LSM store (kvbuf and
// pebble): storeWork returns the store's counters since the engine was
// opened, which the suite reads around each load and run (Result.Store).
type storeCounter interface {
	storeWork() StoreWork
}

// storeWork returns db's store counters, and false if its engine has none.
func storeWork(db *DB) (StoreWork, bool) {
	if s, ok := db.e.(storeCounter); ok {
		return s.storeWork(), true
	}
	return StoreWork{}, false
}

// settleWait bounds how long the settle step waits for an engine's
// background work; past it the step's disk figure is left out
// (workload.ErrStillBusy).
const settleWait = 5 * time.Minute

// waitUntil waits as the bench package's quiesce and settle steps do
// (workload.WaitIdle): until busy reports false on workload.IdleLooks
// looks in a row, ctx's error, or workload.ErrStillBusy after settleWait.
func waitUntil(ctx context.Context, busy func() bool) error {
	return workload.WaitIdle(ctx, settleWait, busy)
}

// DB is a go-ycsb binding: it implements go-ycsb's ycsb.DB and ycsb.BatchDB
// over one engine (kvbuf, pebble, badger or bbolt), encoding each record as
// one value in go-ycsb's row format (see the package documentation).
//
// Every binding is written the same way: reads copy the stored row into a
// per-thread buffer and decode it without allocating; Update reads the row,
// merges the new fields into it and writes it back, as go-ycsb's own
// bindings do; Scan uses the engine's iterator. DB is safe for concurrent
// use by the threads of a go-ycsb client (one InitThread context each).
//
// # Caveats
//
//   - The maps Read, BatchRead and Scan return, and the byte slices in them,
//     are reused by the calling thread's next call: copy what you keep. A
//     context that did not come from InitThread gets fresh memory on every
//     call instead.
//   - Update is not atomic on kvbuf and pebble (a read, then a write): two
//     threads updating different fields of one record at once may lose one
//     of the fields. badger and bbolt run it in one transaction (badger
//     retries it on a conflict).
type DB struct {
	name  string
	e     engine
	codec *codec
}

// Name returns the engine's name ("kvbuf", "pebble", "badger" or "bbolt").
func (db *DB) Name() string { return db.name }

// thread is one client thread's reusable memory.
type thread struct {
	id      int
	key     []byte   // the current key (and, for prefixed engines, table:key)
	keys    [][]byte // batch keys
	row     []byte   // rows read
	out     []byte   // rows written
	rows    [][]byte // batch rows
	slots   [][]byte
	result  map[string][]byte
	results []map[string][]byte
	scratch []byte // engine-private
	engine  any    // engine-private per-thread state
}

type threadKey struct{}

func (db *DB) newThread(id int) *thread {
	return &thread{id: id, slots: make([][]byte, len(db.codec.names)), result: map[string][]byte{}}
}

// thread returns ctx's thread state, or a new one if ctx did not come from
// InitThread.
func (db *DB) thread(ctx context.Context) *thread {
	if t, ok := ctx.Value(threadKey{}).(*thread); ok && len(t.slots) == len(db.codec.names) {
		return t
	}
	return db.newThread(-1)
}

// InitThread implements ycsb.DB: the returned context carries the thread's
// buffers.
func (db *DB) InitThread(ctx context.Context, threadID, threadCount int) context.Context {
	if s, ok := db.e.(interface{ threads(int) }); ok {
		s.threads(threadCount)
	}
	return context.WithValue(ctx, threadKey{}, db.newThread(threadID))
}

// CleanupThread implements ycsb.DB.
func (db *DB) CleanupThread(context.Context) {}

// Close implements ycsb.DB: it closes the engine.
func (db *DB) Close() error { return db.e.close() }

func checkKey(table, key string) error {
	if table == "" {
		return fmt.Errorf("%w: empty table name", ErrBadKey)
	}
	if key == "" {
		return fmt.Errorf("%w: empty key in table %q", ErrBadKey, table)
	}
	return nil
}

// Read implements ycsb.DB: the record's fields named in fields (all of them
// if fields is empty). ErrNotFound if the record does not exist.
func (db *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	if err := checkKey(table, key); err != nil {
		return nil, err
	}
	t := db.thread(ctx)
	t.key = append(t.key[:0], key...)
	row, found, err := db.e.get(t, table, t.key, t.row[:0])
	if err != nil {
		return nil, fmt.Errorf("ycsb %s: read %s/%s: %w", db.name, table, key, err)
	}
	if !found {
		return nil, fmt.Errorf("ycsb %s: read %s/%s: %w", db.name, table, key, ErrNotFound)
	}
	t.row = row
	if err := db.codec.decode(row, t.slots); err != nil {
		return nil, fmt.Errorf("ycsb %s: read %s/%s: %w", db.name, table, key, err)
	}
	db.codec.fill(t.result, t.slots, fields)
	return t.result, nil
}

// Insert implements ycsb.DB: it writes the record (replacing one with the
// same key).
func (db *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	if err := checkKey(table, key); err != nil {
		return err
	}
	t := db.thread(ctx)
	clear(t.slots)
	if err := db.codec.setValues(t.slots, values); err != nil {
		return fmt.Errorf("ycsb %s: insert %s/%s: %w", db.name, table, key, err)
	}
	t.out = db.codec.encode(t.out[:0], t.slots)
	t.key = append(t.key[:0], key...)
	if err := db.e.put(ctx, t, table, t.key, t.out); err != nil {
		return fmt.Errorf("ycsb %s: insert %s/%s: %w", db.name, table, key, err)
	}
	return nil
}

// merge returns the mergeFunc of an update of values.
func (db *DB) merge(t *thread, values map[string][]byte) mergeFunc {
	return func(old, dst []byte) ([]byte, error) {
		if err := db.codec.decode(old, t.slots); err != nil {
			return dst, err
		}
		if err := db.codec.setValues(t.slots, values); err != nil {
			return dst, err
		}
		return db.codec.encode(dst, t.slots), nil
	}
}

// Update implements ycsb.DB: it reads the record, sets the fields of values
// in it and writes it back. ErrNotFound if the record does not exist.
func (db *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	if err := checkKey(table, key); err != nil {
		return err
	}
	t := db.thread(ctx)
	for f := range values { // a bad field fails before anything is read
		if _, err := db.codec.fieldIndex(f); err != nil {
			return fmt.Errorf("ycsb %s: update %s/%s: %w", db.name, table, key, err)
		}
	}
	t.key = append(t.key[:0], key...)
	found, err := db.e.update(ctx, t, table, t.key, db.merge(t, values))
	if err == nil && !found {
		err = ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("ycsb %s: update %s/%s: %w", db.name, table, key, err)
	}
	return nil
}

// Delete implements ycsb.DB. Deleting a missing record is not an error.
func (db *DB) Delete(ctx context.Context, table, key string) error {
	if err := checkKey(table, key); err != nil {
		return err
	}
	t := db.thread(ctx)
	t.key = append(t.key[:0], key...)
	t.keys = append(t.keys[:0], t.key)
	if err := db.e.delete(ctx, t, table, t.keys); err != nil {
		return fmt.Errorf("ycsb %s: delete %s/%s: %w", db.name, table, key, err)
	}
	return nil
}

// Scan implements ycsb.DB: up to count records of table from startKey on,
// in key order, each with the fields named in fields (all if empty).
func (db *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	if table == "" {
		return nil, fmt.Errorf("%w: empty table name", ErrBadKey)
	}
	if count <= 0 {
		return nil, nil
	}
	t := db.thread(ctx)
	t.key = append(t.key[:0], startKey...)
	// Rows are copied one after another into t.row: a result keeps slices
	// into it, so they are cut only once the scan is over.
	t.row = t.row[:0]
	var ends []int
	err := db.e.scan(t, table, t.key, count, func(_, row []byte) error {
		t.row = append(t.row, row...)
		ends = append(ends, len(t.row))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ycsb %s: scan %s from %q: %w", db.name, table, startKey, err)
	}
	for len(t.results) < len(ends) {
		t.results = append(t.results, map[string][]byte{})
	}
	out := t.results[:len(ends)]
	start := 0
	for i, end := range ends {
		if err := db.codec.decode(t.row[start:end], t.slots); err != nil {
			return nil, fmt.Errorf("ycsb %s: scan %s from %q: %w", db.name, table, startKey, err)
		}
		db.codec.fill(out[i], t.slots, fields)
		start = end
	}
	return out, nil
}

// setKeys copies keys into t.keys (backed by t.key).
func (t *thread) setKeys(keys []string) {
	t.key, t.keys = t.key[:0], t.keys[:0]
	for _, k := range keys {
		t.key = append(t.key, k...)
	}
	off := 0
	for _, k := range keys {
		t.keys = append(t.keys, t.key[off:off+len(k):off+len(k)])
		off += len(k)
	}
}

// BatchInsert implements ycsb.BatchDB: every record written as one batch
// (kvbuf: one Batch, one op; pebble: one batch; badger: one transaction;
// bbolt: one write transaction).
func (db *DB) BatchInsert(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	if len(keys) != len(values) {
		return fmt.Errorf("%w: batch insert of %d keys with %d values", ErrBadKey, len(keys), len(values))
	}
	for _, k := range keys {
		if err := checkKey(table, k); err != nil {
			return err
		}
	}
	t := db.thread(ctx)
	t.setKeys(keys)
	t.out, t.rows = t.out[:0], t.rows[:0]
	var ends []int
	for i := range keys {
		clear(t.slots)
		if err := db.codec.setValues(t.slots, values[i]); err != nil {
			return fmt.Errorf("ycsb %s: insert %s/%s: %w", db.name, table, keys[i], err)
		}
		t.out = db.codec.encode(t.out, t.slots)
		ends = append(ends, len(t.out))
	}
	start := 0
	for _, end := range ends {
		t.rows = append(t.rows, t.out[start:end:end])
		start = end
	}
	if err := db.e.putMany(ctx, t, table, t.keys, t.rows); err != nil {
		return fmt.Errorf("ycsb %s: batch insert of %d records into %s: %w", db.name, len(keys), table, err)
	}
	return nil
}

// BatchRead implements ycsb.BatchDB (kvbuf: KV.GetMany). A missing record
// is an error wrapping ErrNotFound, as for Read.
func (db *DB) BatchRead(ctx context.Context, table string, keys []string, fields []string) ([]map[string][]byte, error) {
	for _, k := range keys {
		if err := checkKey(table, k); err != nil {
			return nil, err
		}
	}
	t := db.thread(ctx)
	t.setKeys(keys)
	t.rows = append(t.rows[:0], make([][]byte, len(keys))...)
	buf, err := db.e.getMany(t, table, t.keys, t.rows, t.row[:0])
	if err != nil {
		return nil, fmt.Errorf("ycsb %s: batch read of %d records from %s: %w", db.name, len(keys), table, err)
	}
	t.row = buf
	for len(t.results) < len(keys) {
		t.results = append(t.results, map[string][]byte{})
	}
	out := t.results[:len(keys)]
	for i, row := range t.rows {
		if row == nil {
			return nil, fmt.Errorf("ycsb %s: read %s/%s: %w", db.name, table, keys[i], ErrNotFound)
		}
		if err := db.codec.decode(row, t.slots); err != nil {
			return nil, fmt.Errorf("ycsb %s: read %s/%s: %w", db.name, table, keys[i], err)
		}
		db.codec.fill(out[i], t.slots, fields)
	}
	return out, nil
}

// BatchUpdate implements ycsb.BatchDB: Update of each record in turn.
func (db *DB) BatchUpdate(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	if len(keys) != len(values) {
		return fmt.Errorf("%w: batch update of %d keys with %d values", ErrBadKey, len(keys), len(values))
	}
	for i := range keys {
		if err := db.Update(ctx, table, keys[i], values[i]); err != nil {
			return err
		}
	}
	return nil
}

// BatchDelete implements ycsb.BatchDB: every key deleted as one batch.
func (db *DB) BatchDelete(ctx context.Context, table string, keys []string) error {
	for _, k := range keys {
		if err := checkKey(table, k); err != nil {
			return err
		}
	}
	t := db.thread(ctx)
	t.setKeys(keys)
	if err := db.e.delete(ctx, t, table, t.keys); err != nil {
		return fmt.Errorf("ycsb %s: batch delete of %d records from %s: %w", db.name, len(keys), table, err)
	}
	return nil
}

// Flushing reports whether the engine is flushing right now (kvbuf: a
// generation is being written; pebble: a memtable flush), and whether the
// engine can tell at all (badger and bbolt cannot).
func (db *DB) Flushing() (flushing, known bool) {
	if w, ok := db.e.(flushWatcher); ok {
		return w.flushing(), true
	}
	return false, false
}

// Engines lists the engines Open knows, in the order kvtool ycsb runs them.
var Engines = []string{"kvbuf", "pebble", "badger", "bbolt"}

// RegisteredName returns the name an engine is registered under in
// go-ycsb's registry (ycsb.GetDBCreator): the engine's name, except badger
// v4, registered as "badger4" because go-ycsb's own badger binding (badger
// v1) takes "badger".
func RegisteredName(engine string) string {
	if engine == "badger" {
		return "badger4"
	}
	return engine
}

// Open opens the binding of the engine called name (one of Engines) in dir, creating the
// database if dir is empty or missing, configured by p (nil: defaults; see
// the package documentation for each engine's properties).
func Open(name, dir string, p *properties.Properties) (*DB, error) {
	if p == nil {
		p = properties.NewProperties()
	}
	fc, err := getInt(p, prop.FieldCount, prop.FieldCountDefault, 1, 1<<16)
	if err != nil {
		return nil, err
	}
	var e engine
	switch name {
	case "kvbuf":
		e, err = openKvbuf(dir, p)
	case "pebble":
		e, err = openPebble(dir, p)
	case "badger":
		e, err = openBadger(dir, p)
	case "bbolt":
		e, err = openBbolt(dir, p)
	default:
		return nil, fmt.Errorf("%w: unknown engine %q (want one of %v)", ErrBadProperty, name, Engines)
	}
	if err != nil {
		return nil, fmt.Errorf("ycsb %s: open %s: %w", name, dir, err)
	}
	return &DB{name: name, e: e, codec: newCodec(int(fc))}, nil
}

// checkProperties reports an error wrapping ErrBadProperty if p holds an
// engine property of engine (name) that does not parse or is out of range,
// without opening anything.
func checkProperties(name string, p *properties.Properties) error {
	var err error
	switch name {
	case "kvbuf":
		if _, _, err = kvbufOptions(p); err == nil {
			_, _, err = kvbufHostOptions(p)
		}
	case "pebble":
		_, _, _, err = pebbleOptions(p)
	case "badger":
		_, _, err = badgerOptions("", p)
	case "bbolt":
		_, err = getBool(p, "bbolt.nosync", false)
	default:
		err = fmt.Errorf("%w: unknown engine %q (want one of %v)", ErrBadProperty, name, Engines)
	}
	if err != nil {
		return fmt.Errorf("engine %s: %w", name, err)
	}
	return nil
}

// creator is go-ycsb's DBCreator of one engine: the directory comes from
// the property <engine>.dir.
type creator struct{ engine string }

// Create implements ycsb.DBCreator.
func (c creator) Create(p *properties.Properties) (goycsb.DB, error) {
	dir, ok := p.Get(c.engine + ".dir")
	if !ok || dir == "" {
		return nil, fmt.Errorf("%w: %s.dir is not set", ErrBadProperty, c.engine)
	}
	return Open(c.engine, dir, p)
}

func init() {
	// go-ycsb's registry is the one place a go-ycsb main finds bindings.
	for _, e := range Engines {
		goycsb.RegisterDBCreator(RegisteredName(e), creator{e})
	}
}

var (
	_ goycsb.DB      = (*DB)(nil)
	_ goycsb.BatchDB = (*DB)(nil)
)

// ticker runs a function every interval in a goroutine (the interval
// syncs of the loss-window bindings) until stop, which returns the
// function's first error.
type ticker struct {
	quit chan struct{}
	done chan struct{}
	err  error
}

func startTicker(interval time.Duration, fn func() error) *ticker {
	t := &ticker{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-t.quit:
				return
			case <-tk.C:
				if err := fn(); err != nil && t.err == nil {
					t.err = err
				}
			}
		}
	}()
	return t
}

func (t *ticker) stop() error {
	close(t.quit)
	<-t.done
	return t.err
}
