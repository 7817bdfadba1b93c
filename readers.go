package kvbuf

import "iter"

// KVReader is the read side of a keyspace, live (*KV: the newest state,
// pending changes included) or as of a snapshot (*SnapshotKV: frozen at
// DB.NewSnapshot). Code written against it serves both, as pebble's Reader
// serves a DB, a batch and a snapshot. The methods are documented on *KV.
type KVReader interface {
	Get(key []byte) ([]byte, error)
	GetAppend(dst, key []byte) ([]byte, error)
	GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error)
	Has(key []byte) (bool, error)
	NewIter(o *IterOptions) (*Iter, error)
	All(o *IterOptions) iter.Seq2[[]byte, []byte]
}

// BitsReader is the read side of a bitslice, live (*Bits) or as of a
// snapshot (*SnapshotBits). The methods are documented on *Bits.
type BitsReader interface {
	Get(i uint64) (bool, error)
	GetMany(idx []uint64, out []bool) error
	Len() (uint64, error)
	Count() (uint64, error)
	Ones(from uint64) iter.Seq[uint64]
}

var (
	_ KVReader   = (*KV)(nil)
	_ KVReader   = (*SnapshotKV)(nil)
	_ BitsReader = (*Bits)(nil)
	_ BitsReader = (*SnapshotBits)(nil)
)
