package ycsb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/util"
)

// TestRowMatchesGoYCSB: rows this codec writes decode with go-ycsb's own
// DecodeRow to the same fields, and rows go-ycsb's EncodeRow writes decode
// here.
func TestRowMatchesGoYCSB(t *testing.T) {
	c := newCodec(10)
	r := rand.New(rand.NewSource(1))
	slots := make([][]byte, 10)
	for range 200 {
		clear(slots)
		var cols [][]byte
		var ids []int64
		for i := range slots {
			if r.Intn(3) == 0 {
				continue
			}
			v := make([]byte, r.Intn(300))
			r.Read(v)
			slots[i] = v
			cols, ids = append(cols, v), append(ids, int64(i))
		}
		row := c.encode(nil, slots)
		theirs, err := util.DecodeRow(row)
		if err != nil {
			t.Fatal(err)
		}
		if len(theirs) != len(ids) {
			t.Fatalf("go-ycsb decodes %d fields, want %d", len(theirs), len(ids))
		}
		for i, id := range ids {
			if !bytes.Equal(theirs[id], cols[i]) {
				t.Fatalf("field %d differs", id)
			}
		}
		row2, err := util.EncodeRow(cols, ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]byte, 10)
		if err := c.decode(row2, got); err != nil {
			t.Fatal(err)
		}
		for i := range slots {
			if (slots[i] == nil) != (got[i] == nil) || !bytes.Equal(slots[i], got[i]) {
				t.Fatalf("field %d: %q, want %q", i, got[i], slots[i])
			}
		}
	}
}

// TestRowCorrupt: malformed rows are ErrCorruptRow, never a panic.
func TestRowCorrupt(t *testing.T) {
	c := newCodec(3)
	good := c.encode(nil, [][]byte{[]byte("abc"), nil, []byte("de")})
	slots := make([][]byte, 3)
	for _, bad := range [][]byte{
		{},                            // no fields and not the empty marker: decodes as empty
		{1},                           // bad flag
		{flagVarint},                  // no index
		{flagVarint, 2 * 5},           // index past the table's fields
		{flagVarint, 0},               // no value
		{flagVarint, 0, flagBytes},    // no length
		{flagVarint, 0, flagBytes, 8}, // length past the end
		good[:len(good)-1],            // truncated
	} {
		err := c.decode(bad, slots)
		if len(bad) == 0 {
			if err != nil {
				t.Errorf("empty row: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrCorruptRow) {
			t.Errorf("row %v: %v, want ErrCorruptRow", bad, err)
		}
	}
}

func FuzzRowDecode(f *testing.F) {
	c := newCodec(10)
	f.Add(c.encode(nil, [][]byte{[]byte("x"), nil, []byte("yz")}))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, row []byte) {
		slots := make([][]byte, 10)
		if err := c.decode(row, slots); err != nil {
			return
		}
		// What decodes re-encodes to a row that decodes the same.
		again := make([][]byte, 10)
		if err := c.decode(c.encode(nil, slots), again); err != nil {
			t.Fatal(err)
		}
		for i := range slots {
			if !bytes.Equal(slots[i], again[i]) || (slots[i] == nil) != (again[i] == nil) {
				t.Fatalf("field %d: %q then %q", i, slots[i], again[i])
			}
		}
	})
}

// TestKeyName: key names are go-ycsb's (prefix, hashed number, zero
// padding).
func TestKeyName(t *testing.T) {
	for _, tc := range []struct {
		props string
		n     int64
	}{
		{"", 0}, {"", 12345}, {"insertorder=ordered\nzeropadding=8\n", 42}, {"keyprefix=k\nzeropadding=30\n", 7},
	} {
		p := properties.MustLoadString(tc.props)
		w, err := NewWorkload(p)
		if err != nil {
			t.Fatal(err)
		}
		n := tc.n
		if !strings.Contains(tc.props, "ordered") {
			n = util.Hash64(n)
		}
		want := fmt.Sprintf("%s%0[3]*[2]d", p.GetString("keyprefix", "user"), n, p.GetInt("zeropadding", 1))
		if got := w.KeyName(tc.n); got != want {
			t.Errorf("%q: KeyName(%d) = %q, want %q", tc.props, tc.n, got, want)
		}
	}
}

// TestWorkloadProperties: bad properties are ErrBadProperty, never an exit.
func TestWorkloadProperties(t *testing.T) {
	for _, bad := range []string{
		"readproportion=x", "readproportion=2", "requestdistribution=gaussian", "fieldcount=0",
		"fieldlengthdistribution=histogram", "minscanlength=5\nmaxscanlength=2", "recordcount=10\ninsertstart=8\ninsertcount=5",
		"readproportion=0\nupdateproportion=0", "dataintegrity=true", "requestdistribution=hotspot\nhotspotdatafraction=0",
		"batch.size=4\nscanproportion=0.5", "readallfields=maybe", "table=",
	} {
		if _, err := NewWorkload(properties.MustLoadString(bad)); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%q: %v, want ErrBadProperty", bad, err)
		}
	}
	for name := range StandardWorkloads {
		p, err := WorkloadProperties(strings.ToUpper(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewWorkload(p); err != nil {
			t.Errorf("workload %s: %v", name, err)
		}
	}
	if _, err := WorkloadProperties("no/such/file"); !errors.Is(err, ErrBadProperty) {
		t.Errorf("missing file: %v", err)
	}
	for _, bad := range []string{"kvbuf.flush_interval=x", "kvbuf.max_pending_bytes=-2", "kvbuf.ops=perhaps", "kvbuf.pipeline_depth=-1",
		"kvbuf.ingest_threshold=-2", "kvbuf.read_tier_bytes=-2", "kvbuf.flush_quantum=x", "kvbuf.flush_cpu_percent=101"} {
		if _, err := Open("kvbuf", t.TempDir(), properties.MustLoadString(bad)); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%q: %v, want ErrBadProperty", bad, err)
		}
	}
	if _, err := Open("rocksdb", t.TempDir(), nil); !errors.Is(err, ErrBadProperty) {
		t.Errorf("unknown engine: %v", err)
	}
}

// recorder is a go-ycsb DB that records what the driver asks for.
type recorder struct {
	mu      sync.Mutex
	records map[string]int // key -> fields
	ops     map[string]int
	scanned []int
	// userBytes counts the keys and field values inserted and updated.
	userBytes int64
}

func (r *recorder) Close() error                                             { return nil }
func (r *recorder) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }
func (r *recorder) CleanupThread(context.Context)                            {}
func (r *recorder) count(op, key string, fields int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[op]++
	switch op {
	case OpInsert:
		r.records[key] = fields
	default:
		if _, ok := r.records[key]; !ok {
			return fmt.Errorf("%s of %s: %w", op, key, ErrNotFound)
		}
	}
	return nil
}
func (r *recorder) Read(_ context.Context, _, key string, fields []string) (map[string][]byte, error) {
	return nil, r.count(OpRead, key, len(fields))
}
func (r *recorder) Scan(_ context.Context, _, key string, n int, _ []string) ([]map[string][]byte, error) {
	r.mu.Lock()
	r.scanned = append(r.scanned, n)
	r.mu.Unlock()
	return nil, r.count(OpScan, key, 0)
}
func (r *recorder) Update(_ context.Context, _, key string, v map[string][]byte) error {
	r.wrote(key, v)
	return r.count(OpUpdate, key, len(v))
}
func (r *recorder) Insert(_ context.Context, _, key string, v map[string][]byte) error {
	r.wrote(key, v)
	return r.count(OpInsert, key, len(v))
}

// wrote adds key's and v's bytes to the user bytes written.
func (r *recorder) wrote(key string, v map[string][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.userBytes += int64(len(key))
	for _, b := range v {
		r.userBytes += int64(len(b))
	}
}
func (r *recorder) Delete(_ context.Context, _, key string) error { return nil }

// TestDriver: the operation mix follows the proportions, every key read
// exists (keys not inserted yet are redrawn), inserts get fresh key numbers,
// and two runs with the same seed do the same operations.
func TestDriver(t *testing.T) {
	for _, name := range []string{"a", "d", "e", "f"} {
		t.Run(name, func(t *testing.T) {
			p, _ := WorkloadProperties(name)
			p.MustSet("recordcount", "500")
			p.MustSet("operationcount", "4000")
			w, err := NewWorkload(p)
			if err != nil {
				t.Fatal(err)
			}
			var prev map[string]int
			for range 2 {
				db := &recorder{records: map[string]int{}, ops: map[string]int{}}
				res, err := Load(context.Background(), db, w, 1, RunOptions{Threads: 3})
				if err != nil || res.Records != 500 || len(db.records) != 500 {
					t.Fatalf("load: %v, %d records, %d inserted", err, res.Records, len(db.records))
				}
				if loaded := db.userBytes; res.UserBytes != loaded || loaded < 500*1000 {
					t.Errorf("load: %d user bytes counted, %d written (10 fields of 100 bytes per record, and keys)", res.UserBytes, loaded)
				}
				db.userBytes = 0
				res, err = Run(context.Background(), db, w, 500, RunOptions{Threads: 1, Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				if res.UserBytes != db.userBytes || res.UserBytes == 0 {
					t.Errorf("run: %d user bytes counted, %d written", res.UserBytes, db.userBytes)
				}
				if res.Ops != 4000 || res.Records != int64(len(db.records)) {
					t.Fatalf("%d ops, %d records after, %d inserted", res.Ops, res.Records, len(db.records))
				}
				share := func(op string) float64 { return float64(db.ops[op]) / 4000 }
				switch name {
				case "a":
					if s := share(OpUpdate); s < 0.45 || s > 0.55 {
						t.Errorf("update share %.3f", s)
					}
				case "d":
					if s := share(OpInsert) - 500.0/4000; s < 0.03 || s > 0.07 {
						t.Errorf("insert share %.3f", s)
					}
				case "e":
					for _, n := range db.scanned {
						if n < 1 || n > 100 {
							t.Fatalf("scan length %d", n)
						}
					}
				case "f":
					if int64(db.ops[OpUpdate]) != res.Latency[OpReadModifyWrite].TotalCount() {
						t.Errorf("%d updates, %d read-modify-writes", db.ops[OpUpdate], res.Latency[OpReadModifyWrite].TotalCount())
					}
				}
				if prev != nil && fmt.Sprint(prev) != fmt.Sprint(db.ops) {
					t.Errorf("same seed, different operations: %v then %v", prev, db.ops)
				}
				prev = db.ops
			}
		})
	}
}

// TestRunStopsOnError: an operation error stops every thread and is
// returned; MaxTime ends a run early.
func TestRunStopsOnError(t *testing.T) {
	p, _ := WorkloadProperties("a")
	p.MustSet("recordcount", "100")
	p.MustSet("operationcount", "100000")
	w, _ := NewWorkload(p)
	db := &recorder{records: map[string]int{}, ops: map[string]int{}} // nothing loaded
	if _, err := Run(context.Background(), db, w, 100, RunOptions{Threads: 4}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("run on an empty database: %v, want ErrNotFound", err)
	}
	if _, err := Load(context.Background(), db, w, 10, RunOptions{Threads: 2}); err != nil {
		t.Fatal(err)
	}
	p.MustSet("operationcount", "1000000000")
	w, _ = NewWorkload(p)
	start := time.Now()
	res, err := Run(context.Background(), db, w, 100, RunOptions{Threads: 2, MaxTime: 50 * time.Millisecond})
	if err != nil || res.Ops == 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("capped run: %v, %d ops in %v", err, res.Ops, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, db, w, 100, RunOptions{Threads: 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
}

// TestRunLabels: a run's profile labels name its durability mode, engine,
// workload and thread count (what pprof -tagfocus selects on).
func TestRunLabels(t *testing.T) {
	got := map[string]string{}
	pprof.Do(t.Context(), runLabels("window", "kvbuf", "c", 4), func(ctx context.Context) {
		pprof.ForLabels(ctx, func(k, v string) bool {
			got[k] = v
			return true
		})
	})
	want := map[string]string{"durability": "window", "db": "kvbuf", "workload": "c", "threads": "4"}
	if !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
}

// flushingRecorder is a recorder that says whether it is flushing.
type flushingRecorder struct {
	*recorder
	on bool
}

func (f *flushingRecorder) Flushing() (flushing, known bool) { return f.on, true }

// TestOpsInFlush: reads and scans timed while the engine says it flushes
// are also counted under READ@FLUSH and SCAN@FLUSH (E's reads are scans: it
// had no figure during flushes before SCAN@FLUSH), and none when it does
// not flush.
func TestOpsInFlush(t *testing.T) {
	for _, c := range []struct{ workload, op, inFlush string }{
		{"b", OpRead, OpReadInFlush},
		{"e", OpScan, OpScanInFlush},
	} {
		p, _ := WorkloadProperties(c.workload)
		p.MustSet("recordcount", "200")
		p.MustSet("operationcount", "1000")
		w, err := NewWorkload(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, on := range []bool{true, false} {
			db := &flushingRecorder{recorder: &recorder{records: map[string]int{}, ops: map[string]int{}}, on: on}
			if _, err := Load(context.Background(), db, w, 1, RunOptions{Threads: 2}); err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), db, w, 200, RunOptions{Threads: 2, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			all := res.Latency[c.op]
			if all == nil || all.TotalCount() == 0 {
				t.Fatalf("%s: no %s timed", c.workload, c.op)
			}
			var in int64
			if h := res.Latency[c.inFlush]; h != nil {
				in = h.TotalCount()
			}
			if want := map[bool]int64{true: all.TotalCount(), false: 0}[on]; in != want {
				t.Errorf("%s, flushing %v: %d of %d %s counted under %s, want %d", c.workload, on, in, all.TotalCount(), c.op, c.inFlush, want)
			}
		}
	}
}
