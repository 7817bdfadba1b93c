package raftkv

import (
	"encoding/binary"
	"fmt"
)

// A command is one client write. A normal raft entry holds one command or
// a batch of them (the writes the leader's Ready loop found queued
// together), applied as one op of the engine: the entry's index.
//
// Entry payloads: a command alone (its encoding, version 1), or a batch:
// version byte (2) | (uvarint length | command)*, at least two.
//
// Command encoding (version 1): version byte (1) | kind byte | request ID u64
// little-endian | fields by kind, each byte string as uvarint length and
// bytes:
//
//	put              name | key | value
//	delete           name | key
//	delete-range     name | flags byte (1: lower set, 2: upper set) | lower | upper
//	set-bit          name | uvarint index | value byte (0 or 1)
//	create-keyspace  name
//	create-bitslice  name
//	meta             name (empty) | uvarint cluster ID | uvarint node | uvarint incarnation
//
// A meta command is the node's own, not the state machine's: the first
// leader assigns the cluster ID with one (0: none), and a leader records
// the incarnation of a member's data directory with one (node 0: none);
// the first value applied wins (see identity).
//
// The request ID matches the applied entry to the client waiting for it on
// the node that proposed it; it is random per node start plus a counter.
type command struct {
	kind         cmdKind
	id           uint64
	name         string
	key, value   []byte // put, delete; delete-range: lower, upper
	hasLo, hasHi bool   // delete-range: bounds present (nil = open)
	bit          uint64
	set          bool
	// meta: the cluster ID, the node and its incarnation.
	cluster, node, incarnation uint64
}

type cmdKind byte

const (
	cmdPut cmdKind = 1 + iota
	cmdDelete
	cmdDeleteRange
	cmdSetBit
	cmdCreateKeyspace
	cmdCreateBitslice
	cmdMeta
)

const (
	cmdVersion      = 1
	cmdBatchVersion = 2
)

// String names the kind for logs and errors.
func (k cmdKind) String() string {
	switch k {
	case cmdPut:
		return "put"
	case cmdDelete:
		return "delete"
	case cmdDeleteRange:
		return "delete-range"
	case cmdSetBit:
		return "set-bit"
	case cmdCreateKeyspace:
		return "create-keyspace"
	case cmdCreateBitslice:
		return "create-bitslice"
	case cmdMeta:
		return "meta"
	}
	return fmt.Sprintf("kind-%d", byte(k))
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// encode returns the entry payload of c.
func (c *command) encode() []byte {
	b := make([]byte, 0, 10+3*binary.MaxVarintLen64+len(c.name)+len(c.key)+len(c.value))
	b = append(b, cmdVersion, byte(c.kind))
	b = binary.LittleEndian.AppendUint64(b, c.id)
	b = appendBytes(b, []byte(c.name))
	switch c.kind {
	case cmdPut:
		b = appendBytes(b, c.key)
		b = appendBytes(b, c.value)
	case cmdDelete:
		b = appendBytes(b, c.key)
	case cmdDeleteRange:
		var flags byte
		if c.hasLo {
			flags |= 1
		}
		if c.hasHi {
			flags |= 2
		}
		b = append(b, flags)
		b = appendBytes(b, c.key)
		b = appendBytes(b, c.value)
	case cmdSetBit:
		b = binary.AppendUvarint(b, c.bit)
		v := byte(0)
		if c.set {
			v = 1
		}
		b = append(b, v)
	case cmdMeta:
		b = binary.AppendUvarint(b, c.cluster)
		b = binary.AppendUvarint(b, c.node)
		b = binary.AppendUvarint(b, c.incarnation)
	}
	return b
}

// decoder reads the fields of an encoded command; the first error sticks.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errorf("bad %s: %w", what, ErrCorruptLog)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil || len(d.p) < 1 {
		d.fail(what)
		return 0
	}
	v := d.p[0]
	d.p = d.p[1:]
	return v
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil || n > uint64(len(d.p)) {
		d.fail(what)
		return nil
	}
	v := d.p[:n:n]
	d.p = d.p[n:]
	return v
}

// decodeEntry decodes the payload of a normal entry into its commands,
// appended to cmds. The commands refer to p's bytes. Errors wrap
// ErrCorruptLog.
func decodeEntry(cmds []*command, p []byte) ([]*command, error) {
	if len(p) == 0 || p[0] != cmdBatchVersion {
		c, err := decodeCommand(p)
		if err != nil {
			return cmds, err
		}
		return append(cmds, c), nil
	}
	d := &decoder{p: p[1:]}
	for len(d.p) > 0 && d.err == nil {
		b := d.bytes("batched command")
		if d.err != nil {
			break
		}
		c, err := decodeCommand(b)
		if err != nil {
			return cmds, err
		}
		if c.kind == cmdMeta {
			return cmds, errorf("a meta command in a batch: %w", ErrCorruptLog)
		}
		cmds = append(cmds, c)
	}
	return cmds, d.err
}

// decodeCommand decodes one command. The returned command refers to p's
// bytes. Errors wrap ErrCorruptLog.
func decodeCommand(p []byte) (*command, error) {
	d := &decoder{p: p}
	if v := d.byte("version"); d.err == nil && v != cmdVersion {
		return nil, errorf("command version %d (this node reads %d): %w", v, cmdVersion, ErrCorruptLog)
	}
	c := &command{kind: cmdKind(d.byte("kind"))}
	if d.err == nil && len(d.p) < 8 {
		d.fail("request ID")
	}
	if d.err == nil {
		c.id = binary.LittleEndian.Uint64(d.p)
		d.p = d.p[8:]
	}
	c.name = string(d.bytes("name"))
	switch c.kind {
	case cmdPut:
		c.key = d.bytes("key")
		c.value = d.bytes("value")
	case cmdDelete:
		c.key = d.bytes("key")
	case cmdDeleteRange:
		flags := d.byte("range flags")
		if flags&^3 != 0 {
			d.fail("range flags")
		}
		c.hasLo, c.hasHi = flags&1 != 0, flags&2 != 0
		c.key = d.bytes("lower bound")
		c.value = d.bytes("upper bound")
	case cmdSetBit:
		c.bit = d.uvarint("bit index")
		switch d.byte("bit value") {
		case 0:
		case 1:
			c.set = true
		default:
			d.fail("bit value")
		}
	case cmdCreateKeyspace, cmdCreateBitslice:
	case cmdMeta:
		c.cluster = d.uvarint("cluster ID")
		c.node = d.uvarint("node")
		c.incarnation = d.uvarint("incarnation")
	default:
		d.fail("kind")
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail("length (trailing bytes)")
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}
