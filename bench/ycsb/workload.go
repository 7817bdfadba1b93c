package ycsb

import (
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/generator"
	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/util"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"
)

// Operation names, as go-ycsb's and YCSB's measurements call them.
const (
	OpRead            = "READ"
	OpUpdate          = "UPDATE"
	OpInsert          = "INSERT"
	OpScan            = "SCAN"
	OpReadModifyWrite = "READ_MODIFY_WRITE"
	OpBatchRead       = "BATCH_READ"
	OpBatchUpdate     = "BATCH_UPDATE"
	OpBatchInsert     = "BATCH_INSERT"
)

// Workload is YCSB's core workload (site.ycsb.workloads.CoreWorkload, as
// go-ycsb implements it in pkg/workload), configured from the same
// properties, driven by go-ycsb's generators (pkg/generator). It is its own
// driver rather than go-ycsb's pkg/workload and pkg/client because those
// exit the process on a bad property, print to stdout and record into a
// process-wide measurement; this one returns errors, keeps its generators
// per thread (go-ycsb's share theirs across threads without
// synchronisation) and seeds them, so that every engine of a round sees the
// same operations.
//
// Two details follow the Java YCSB rather than go-ycsb: a zipfian or
// uniform key chooser redraws a key not inserted yet (go-ycsb reads it and
// counts a failure), and the insert key sequence is acknowledged under a
// lock.
//
// Properties read (defaults as YCSB's): table, fieldcount, fieldlength,
// fieldlengthdistribution (constant, uniform, zipfian), readallfields,
// writeallfields, readproportion, updateproportion, insertproportion,
// scanproportion, readmodifywriteproportion, requestdistribution (uniform,
// sequential, zipfian, latest, hotspot, exponential), minscanlength,
// maxscanlength, scanlengthdistribution (uniform, zipfian), insertorder
// (hashed, ordered), zeropadding, keyprefix, hotspotdatafraction,
// hotspotopnfraction, exponential.percentile, exponential.frac, insertstart,
// insertcount, recordcount, operationcount, batch.size. recordcount and
// operationcount default to 1000 here (YCSB requires them).
type Workload struct {
	// Table is the table the records live in (table; default usertable).
	Table string
	// FieldCount is the number of fields per record (fieldcount; 10).
	FieldCount int
	// FieldLength is each field's length in bytes, or its maximum with a
	// uniform or zipfian fieldlengthdistribution (fieldlength; 100).
	FieldLength     int64
	fieldLengthDist string
	// ReadAllFields makes reads and scans fetch every field rather than one
	// (readallfields; true); WriteAllFields makes updates write every
	// field rather than one (writeallfields; false).
	ReadAllFields  bool
	WriteAllFields bool

	read, update, insert, scan, rmw float64

	// RequestDistribution is how keys are chosen (requestdistribution;
	// uniform).
	RequestDistribution string
	minScan, maxScan    int64
	scanLengthDist      string
	orderedInserts      bool
	zeroPadding         int
	keyPrefix           string
	hotData, hotOpn     float64
	expPercentile       float64
	expFrac             float64

	// RecordCount is the number of records in the table when a run starts
	// (recordcount); InsertStart and InsertCount the range the load phase
	// inserts (insertstart, insertcount: default all of [0, RecordCount)).
	RecordCount, InsertStart, InsertCount int64
	// OperationCount is the number of operations of a run
	// (operationcount).
	OperationCount int64
	// BatchSize (batch.size) > 1 makes each read, update and insert a
	// batch of that many (BatchRead, BatchUpdate, BatchInsert).
	BatchSize int

	fieldNames []string
}

// NewWorkload reads a core workload from p. Errors wrap ErrBadProperty.
func NewWorkload(p *properties.Properties) (*Workload, error) {
	w := &Workload{}
	var err error
	get := func(key string, def, lo, hi int64) int64 {
		if err != nil {
			return 0
		}
		var v int64
		v, err = getInt(p, key, def, lo, hi)
		return v
	}
	getF := func(key string, def, lo, hi float64) float64 {
		if err != nil {
			return 0
		}
		var v float64
		v, err = getFloat(p, key, def, lo, hi)
		return v
	}
	getB := func(key string, def bool) bool {
		if err != nil {
			return false
		}
		var v bool
		v, err = getBool(p, key, def)
		return v
	}
	getC := func(key, def string, choices ...string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = getChoice(p, key, def, choices...)
		return v
	}
	if w.Table = p.GetString(prop.TableName, prop.TableNameDefault); w.Table == "" {
		return nil, fmt.Errorf("%w: %s is empty", ErrBadProperty, prop.TableName)
	}
	w.FieldCount = int(get(prop.FieldCount, prop.FieldCountDefault, 1, 1<<16))
	w.FieldLength = get(prop.FieldLength, prop.FieldLengthDefault, 1, 1<<20)
	w.fieldLengthDist = getC(prop.FieldLengthDistribution, prop.FieldLengthDistributionDefault, "constant", "uniform", "zipfian")
	w.ReadAllFields = getB(prop.ReadAllFields, prop.ReadALlFieldsDefault)
	w.WriteAllFields = getB(prop.WriteAllFields, prop.WriteAllFieldsDefault)
	w.read = getF(prop.ReadProportion, prop.ReadProportionDefault, 0, 1)
	w.update = getF(prop.UpdateProportion, prop.UpdateProportionDefault, 0, 1)
	w.insert = getF(prop.InsertProportion, prop.InsertProportionDefault, 0, 1)
	w.scan = getF(prop.ScanProportion, prop.ScanProportionDefault, 0, 1)
	w.rmw = getF(prop.ReadModifyWriteProportion, prop.ReadModifyWriteProportionDefault, 0, 1)
	w.RequestDistribution = getC(prop.RequestDistribution, prop.RequestDistributionDefault,
		"uniform", "sequential", "zipfian", "latest", "hotspot", "exponential")
	w.minScan = get(prop.MinScanLength, prop.MinScanLengthDefault, 1, 1<<20)
	w.maxScan = get(prop.MaxScanLength, prop.MaxScanLengthDefault, 1, 1<<20)
	w.scanLengthDist = getC(prop.ScanLengthDistribution, prop.ScanLengthDistributionDefault, "uniform", "zipfian")
	w.orderedInserts = getC(prop.InsertOrder, prop.InsertOrderDefault, "hashed", "ordered") == "ordered"
	w.zeroPadding = int(get(prop.ZeroPadding, prop.ZeroPaddingDefault, 1, 64))
	w.keyPrefix = p.GetString(prop.KeyPrefix, prop.KeyPrefixDefault)
	w.hotData = getF(prop.HotspotDataFraction, prop.HotspotDataFractionDefault, 0, 1)
	w.hotOpn = getF(prop.HotspotOpnFraction, prop.HotspotOpnFractionDefault, 0, 1)
	w.expPercentile = getF(prop.ExponentialPercentile, prop.ExponentialPercentileDefault, 0, 100)
	w.expFrac = getF(prop.ExponentialFrac, prop.ExponentialFracDefault, 0, 1)
	w.RecordCount = get(prop.RecordCount, 1000, 1, 1<<40)
	w.InsertStart = get(prop.InsertStart, prop.InsertStartDefault, 0, 1<<40)
	w.InsertCount = get(prop.InsertCount, w.RecordCount-w.InsertStart, 1, 1<<40)
	w.OperationCount = get(prop.OperationCount, 1000, 1, 1<<40)
	w.BatchSize = int(get(prop.BatchSize, int64(prop.DefaultBatchSize), 1, 1<<16))
	if dataIntegrity := getB(prop.DataIntegrity, false); dataIntegrity {
		err = fmt.Errorf("%w: %s is not supported", ErrBadProperty, prop.DataIntegrity)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case w.read+w.update+w.insert+w.scan+w.rmw <= 0:
		return nil, fmt.Errorf("%w: every operation proportion is 0", ErrBadProperty)
	case w.minScan > w.maxScan:
		return nil, fmt.Errorf("%w: minscanlength %d > maxscanlength %d", ErrBadProperty, w.minScan, w.maxScan)
	case w.InsertStart+w.InsertCount > w.RecordCount:
		return nil, fmt.Errorf("%w: insertstart %d + insertcount %d > recordcount %d", ErrBadProperty, w.InsertStart, w.InsertCount, w.RecordCount)
	case w.RequestDistribution == "hotspot" && (w.hotData <= 0 || w.hotData >= 1):
		return nil, fmt.Errorf("%w: hotspotdatafraction %g: want 0 < f < 1", ErrBadProperty, w.hotData)
	case w.BatchSize > 1 && (w.scan > 0 || w.rmw > 0):
		return nil, fmt.Errorf("%w: batch.size %d with scans or read-modify-writes (go-ycsb batches only reads, updates and inserts)", ErrBadProperty, w.BatchSize)
	}
	w.fieldNames = newCodec(w.FieldCount).names
	return w, nil
}

// KeyName returns the record key of key number n: keyprefix and n (hashed
// unless insertorder=ordered), zero-padded to zeropadding digits, as
// go-ycsb builds it.
func (w *Workload) KeyName(n int64) string {
	return string(w.appendKey(nil, n))
}

func (w *Workload) appendKey(dst []byte, n int64) []byte {
	if !w.orderedInserts {
		n = util.Hash64(n)
	}
	dst = append(dst, w.keyPrefix...)
	var num [24]byte
	d := strconv.AppendInt(num[:0], n, 10)
	for range w.zeroPadding - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// keySeq is the insert key sequence shared by a run's threads: numbers are
// handed out in order, and Last is the highest number below which every
// number has been acknowledged (inserted), so readers choose only keys
// that exist. It implements go-ycsb's Generator (the basis of "latest").
type keySeq struct {
	next  atomic.Int64
	limit atomic.Int64
	mu    sync.Mutex
	acked map[int64]struct{}
}

func newKeySeq(start int64) *keySeq {
	s := &keySeq{acked: map[int64]struct{}{}}
	s.next.Store(start)
	s.limit.Store(start - 1)
	return s
}

// Next hands out the next key number.
func (s *keySeq) Next(*rand.Rand) int64 { return s.next.Add(1) - 1 }

// Last returns the highest key number below which all are acknowledged.
func (s *keySeq) Last() int64 { return s.limit.Load() }

// ack acknowledges n (inserted).
func (s *keySeq) ack(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked[n] = struct{}{}
	l := s.limit.Load()
	for {
		if _, ok := s.acked[l+1]; !ok {
			break
		}
		delete(s.acked, l+1)
		l++
	}
	s.limit.Store(l)
}

// chooser is one thread's generators: go-ycsb's keep a last value each and
// are not safe for concurrent use.
type chooser struct {
	w       *Workload
	r       *rand.Rand
	op      *generator.Discrete
	key     goycsb.Generator
	exp     bool
	field   *generator.Uniform
	length  goycsb.Generator
	scanLen goycsb.Generator
	seq     *keySeq
}

type opKind int64

const (
	kindRead opKind = iota + 1
	kindUpdate
	kindInsert
	kindScan
	kindRMW
)

// newChooser returns a thread's generators. With a nil seq (a load) it
// chooses values only.
func (w *Workload) newChooser(seed int64, seq *keySeq, records int64) *chooser {
	c := &chooser{w: w, r: rand.New(rand.NewSource(seed)), seq: seq}
	c.op = generator.NewDiscrete()
	for _, p := range []struct {
		w float64
		k opKind
	}{{w.read, kindRead}, {w.update, kindUpdate}, {w.insert, kindInsert}, {w.scan, kindScan}, {w.rmw, kindRMW}} {
		if p.w > 0 {
			c.op.Add(p.w, int64(p.k))
		}
	}
	c.field = generator.NewUniform(0, int64(w.FieldCount-1))
	switch w.fieldLengthDist {
	case "uniform":
		c.length = generator.NewUniform(1, w.FieldLength)
	case "zipfian":
		c.length = generator.NewZipfianWithRange(1, w.FieldLength, generator.ZipfianConstant)
	default:
		c.length = generator.NewConstant(w.FieldLength)
	}
	if seq == nil {
		return c
	}
	lo, hi := w.InsertStart, w.InsertStart+w.InsertCount-1
	if records > w.RecordCount { // earlier runs inserted more: choose among them too
		hi += records - w.RecordCount
	}
	switch w.RequestDistribution {
	case "uniform":
		c.key = generator.NewUniform(lo, hi)
	case "sequential":
		c.key = generator.NewSequential(lo, hi)
	case "zipfian":
		// As YCSB: the key space includes the keys this run may insert, and
		// keys not inserted yet are redrawn.
		expected := int64(float64(w.OperationCount) * w.insert * 2)
		c.key = generator.NewScrambledZipfian(lo, hi+expected, generator.ZipfianConstant)
	case "latest":
		c.key = generator.NewSkewedLatest(seq)
	case "hotspot":
		c.key = generator.NewHotspot(lo, hi, w.hotData, w.hotOpn)
	case "exponential":
		c.key = generator.NewExponential(w.expPercentile, float64(records)*w.expFrac)
		c.exp = true
	}
	if w.scanLengthDist == "zipfian" {
		c.scanLen = generator.NewZipfianWithRange(w.minScan, w.maxScan, generator.ZipfianConstant)
	} else {
		c.scanLen = generator.NewUniform(w.minScan, w.maxScan)
	}
	return c
}

func (c *chooser) nextOp() opKind { return opKind(c.op.Next(c.r)) }

// nextKey returns the number of an existing record (YCSB's nextKeynum).
func (c *chooser) nextKey() int64 {
	last := c.seq.Last()
	for {
		if c.exp {
			if n := last - c.key.Next(c.r); n >= 0 {
				return n
			}
			continue
		}
		if n := c.key.Next(c.r); n <= last {
			return n
		}
	}
}

// letters are the bytes of random field values, as go-ycsb's RandBytes.
const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// value returns a random field value in buf (reused).
func (c *chooser) value(buf []byte) []byte {
	n := int(c.length.Next(c.r))
	buf = buf[:0]
	for len(buf) < n {
		// Ten letters per random word (go-ycsb draws one per byte, which
		// would cost more than some engines' operations).
		x := c.r.Uint64()
		for i := 0; i < 10 && len(buf) < n; i++ {
			buf = append(buf, letters[(x&63)%uint64(len(letters))])
			x >>= 6
		}
	}
	return buf
}

// fields returns the fields a read or scan asks for: all (nil) or one.
func (c *chooser) fields(one []string) []string {
	if c.w.ReadAllFields {
		return nil
	}
	one[0] = c.w.fieldNames[c.field.Next(c.r)]
	return one
}

// values fills m with new values for every field or one, into bufs.
func (c *chooser) values(m map[string][]byte, bufs [][]byte, all bool) {
	clear(m)
	if all {
		for i, f := range c.w.fieldNames {
			bufs[i] = c.value(bufs[i])
			m[f] = bufs[i]
		}
		return
	}
	i := c.field.Next(c.r)
	bufs[i] = c.value(bufs[i])
	m[c.w.fieldNames[i]] = bufs[i]
}

func (c *chooser) scanLength() int { return int(c.scanLen.Next(c.r)) }
