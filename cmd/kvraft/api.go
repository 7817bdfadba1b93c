package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/raftkv"
)

// server is the HTTP API of one node.
type server struct {
	n       *raftkv.Node
	timeout time.Duration
	maxLag  uint64       // /health's bound on commit - applied
	auth    *authorizer  // who may write and administer
	scheme  string       // "http" or "https": of every node's API
	client  *http.Client // forwards writes to the leader
}

const (
	// headerForwarded marks a write a follower forwarded: the node it
	// reaches does not forward it again.
	headerForwarded  = "X-Kvraft-Forwarded"
	defaultScanLimit = 1000
	maxScanLimit     = 100000
	// maxValueBody bounds a PUT body: one byte over kvbuf's default
	// MaxValueSize is enough to refuse an oversize value with 413.
	maxValueBody = 1<<20 + 1
	maxSmallBody = 64
)

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/raft/", s.n.Handler())
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", metricsHandler(s.n))
	mux.HandleFunc("GET /snapshot", s.snapshot)
	mux.HandleFunc("GET /keyspaces", s.listNames)
	mux.HandleFunc("PUT /keyspaces/{name}", s.write(func(ctx context.Context, r *http.Request, _ []byte) error {
		return s.n.CreateKeyspace(ctx, r.PathValue("name"))
	}, 0))
	mux.HandleFunc("PUT /bitslices/{name}", s.write(func(ctx context.Context, r *http.Request, _ []byte) error {
		return s.n.CreateBitslice(ctx, r.PathValue("name"))
	}, 0))
	mux.HandleFunc("PUT /kv/{ks}/{key...}", s.write(func(ctx context.Context, r *http.Request, body []byte) error {
		return s.n.Put(ctx, r.PathValue("ks"), []byte(r.PathValue("key")), body)
	}, maxValueBody))
	mux.HandleFunc("DELETE /kv/{ks}/{key...}", s.write(func(ctx context.Context, r *http.Request, _ []byte) error {
		if r.PathValue("key") == "" {
			return s.deleteRange(ctx, r)
		}
		return s.n.Delete(ctx, r.PathValue("ks"), []byte(r.PathValue("key")))
	}, 0))
	mux.HandleFunc("DELETE /kv/{ks}", s.write(func(ctx context.Context, r *http.Request, _ []byte) error {
		return s.deleteRange(ctx, r)
	}, 0))
	mux.HandleFunc("POST /kv/{ks}", s.pipeline)
	mux.HandleFunc("GET /kv/{ks}/{key...}", s.get)
	mux.HandleFunc("GET /kv/{ks}", s.scan)
	mux.HandleFunc("PUT /bits/{name}/{index}", s.write(func(ctx context.Context, r *http.Request, body []byte) error {
		i, err := bitIndex(r)
		if err != nil {
			return err
		}
		var v bool
		switch strings.TrimSpace(string(body)) {
		case "1", "true":
			v = true
		case "0", "false":
		default:
			return badRequest("the body of a bit write is 1 or 0, not %q", body)
		}
		return s.n.SetBit(ctx, r.PathValue("name"), i, v)
	}, maxSmallBody))
	mux.HandleFunc("GET /bits/{name}/{index}", s.getBit)
	mux.HandleFunc("GET /members", s.listMembers)
	mux.HandleFunc("POST /members/{id}", s.memberWrite(func(ctx context.Context, id uint64, r *http.Request, _ []byte) error {
		addr := r.URL.Query().Get("addr")
		if addr == "" {
			return badRequest("?addr=HOST:PORT is required")
		}
		return s.n.AddLearner(ctx, id, addr)
	}, 0))
	mux.HandleFunc("POST /members/{id}/promote", s.memberWrite(func(ctx context.Context, id uint64, r *http.Request, _ []byte) error {
		return s.n.PromoteNode(ctx, id)
	}, 0))
	mux.HandleFunc("PUT /members/{id}/addr", s.memberWrite(func(ctx context.Context, id uint64, r *http.Request, body []byte) error {
		addr := strings.TrimSpace(string(body))
		if addr == "" {
			return badRequest("the body is the new address, HOST:PORT")
		}
		return s.n.UpdateNode(ctx, id, addr)
	}, maxSmallBody+256))
	mux.HandleFunc("DELETE /members/{id}", s.memberWrite(func(ctx context.Context, id uint64, r *http.Request, _ []byte) error {
		return s.n.RemoveNode(ctx, id)
	}, 0))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s (see 'go doc ./cmd/kvraft')", r.Method, r.URL.Path))
	})
	return mux
}

// errBadRequest marks an error of the request itself (400).
var errBadRequest = errors.New("bad request")

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadRequest}, a...)...)
}

func bitIndex(r *http.Request) (uint64, error) {
	i, err := strconv.ParseUint(r.PathValue("index"), 10, 64)
	if err != nil {
		return 0, badRequest("bit index %q is not a non-negative number", r.PathValue("index"))
	}
	return i, nil
}

func memberID(r *http.Request) (uint64, error) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return 0, badRequest("node ID %q is not a non-zero number", r.PathValue("id"))
	}
	return id, nil
}

func (s *server) deleteRange(ctx context.Context, r *http.Request) error {
	q := r.URL.Query()
	var lo, hi []byte
	if q.Has("start") {
		lo = []byte(q.Get("start"))
	}
	if q.Has("end") {
		hi = []byte(q.Get("end"))
	}
	if lo == nil && hi == nil && q.Get("all") != "1" {
		return badRequest("a range delete needs ?start=, ?end= or ?all=1")
	}
	return s.n.DeleteRange(ctx, r.PathValue("ks"), lo, hi)
}

// memberWrite is write for the /members/{id} endpoints: fn gets the
// member's ID, parsed from the path (memberID).
func (s *server) memberWrite(fn func(ctx context.Context, id uint64, r *http.Request, body []byte) error, limit int64) http.HandlerFunc {
	return s.write(func(ctx context.Context, r *http.Request, body []byte) error {
		id, err := memberID(r)
		if err != nil {
			return err
		}
		return fn(ctx, id, r, body)
	}, limit)
}

// readBody authenticates a write's request and reads its body, at most
// limit bytes; if it cannot, it answers the request (401, 413 or 400) and
// returns false.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if err := s.auth.check(r); err != nil {
		writeError(w, http.StatusUnauthorized, fmt.Errorf("node %d: %w", s.n.ID(), err))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max(limit, 1)))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig) && limit == maxValueBody:
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("value larger than %d bytes: %w", limit-1, kvbuf.ErrValueTooLarge))
		return nil, false
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", limit))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, fmt.Errorf("read request body: %w", err))
		return nil, false
	}
	return body, true
}

// write returns the handler of a write: read the body (at most limit
// bytes; 413 beyond), apply fn on this node, or forward the request to the
// leader if this node does not lead.
func (s *server) write(fn func(ctx context.Context, r *http.Request, body []byte) error, limit int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBody(w, r, limit)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		err := fn(ctx, r, body)
		if errors.Is(err, raftkv.ErrNotLeader) && r.Header.Get(headerForwarded) == "" {
			s.forward(w, r, body)
			return
		}
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// forward sends a write to the leader and relays its answer.
func (s *server) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	lead, addr := s.n.Leader()
	if lead == 0 || addr == "" {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("no leader known to node %d: retry", s.n.ID()))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, s.scheme+"://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	req.Header.Set(headerForwarded, strconv.FormatUint(s.n.ID(), 10))
	// The client's credentials go along; over TLS the follower presents
	// its peer certificate too, which the leader accepts for writes.
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// The leader may have applied it before the connection failed.
		writeError(w, http.StatusGatewayTimeout, fmt.Errorf("forwarded to leader %d at %s: %w: %w", lead, addr, raftkv.ErrOutcomeUnknown, err))
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 8<<20)) // a pipeline's results: up to 10,000 lines
}

func readOptions(r *http.Request) (*raftkv.ReadOptions, error) {
	switch v := r.URL.Query().Get("stale"); v {
	case "", "0", "false":
		return nil, nil
	case "1", "true":
		return &raftkv.ReadOptions{Stale: true}, nil
	default:
		return nil, badRequest("?stale=%q: want 1 or 0", v)
	}
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	ro, err := readOptions(r)
	if err == nil && r.PathValue("key") == "" {
		s.scan(w, r)
		return
	}
	var v []byte
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		v, err = s.n.Get(ctx, r.PathValue("ks"), []byte(r.PathValue("key")), ro)
	}
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(v)
}

const (
	// maxPipelineWrites and maxPipelineBody bound a POST /kv/{ks}.
	maxPipelineWrites = 10000
	maxPipelineBody   = 32 << 20
)

// pipelinedWrite is one write of POST /kv/{ks}: key (or key_b64) and value (or
// value_b64) of a put, or "delete": true.
type pipelinedWrite struct {
	Key      *string `json:"key"`
	KeyB64   []byte  `json:"key_b64"`
	Value    *string `json:"value"`
	ValueB64 []byte  `json:"value_b64"`
	Delete   bool    `json:"delete"`
}

// resultJSON is the result of one write of POST /kv/{ks}: the status its
// own request would have had (204: applied), and the error.
type resultJSON struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// pipeline serves POST /kv/{ks}: a body of writes to keyspace ks, one JSON
// object per line, applied in order and pipelined (raftkv's Node.Write:
// proposed together, sharing raft entries, one round of raft for all
// rather than one each); the answer, once every write is applied, is 200
// with one JSON result per line, in the same order. A malformed body is
// refused whole (400, nothing applied); a follower forwards the request to
// the leader.
func (s *server) pipeline(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, maxPipelineBody)
	if !ok {
		return
	}
	ws, err := parseWrites(r.PathValue("ks"), body)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if !s.n.IsLeader() && r.Header.Get(headerForwarded) == "" {
		s.forward(w, r, body)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	errs := s.n.Write(ctx, ws)
	if r.Header.Get(headerForwarded) == "" && len(errs) > 0 && errors.Is(errs[0], raftkv.ErrNotLeader) {
		// Not the leader any more: nothing was proposed.
		s.forward(w, r, body)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, err := range errs {
		res := resultJSON{Status: http.StatusNoContent}
		if err != nil {
			res.Status, res.Error = statusOf(err), err.Error()
		}
		_ = enc.Encode(res)
	}
	_ = bw.Flush()
}

// parseWrites parses the body of POST /kv/{ks}.
func parseWrites(ks string, body []byte) ([]raftkv.Write, error) {
	var ws []raftkv.Write
	for line, rest := 1, body; len(rest) > 0; line++ {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if len(ws) == maxPipelineWrites {
			return nil, badRequest("more than %d writes in one request", maxPipelineWrites)
		}
		var wj pipelinedWrite
		dec := json.NewDecoder(bytes.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&wj); err != nil {
			return nil, badRequest("line %d: %v", line, err)
		}
		w := raftkv.Write{Keyspace: ks, Delete: wj.Delete}
		var hasKey, hasValue, both bool
		w.Key, hasKey, both = textOrB64(wj.Key, wj.KeyB64)
		switch {
		case both:
			return nil, badRequest("line %d: key and key_b64 are one key: give one", line)
		case !hasKey:
			return nil, badRequest("line %d: no key (key or key_b64)", line)
		}
		w.Value, hasValue, both = textOrB64(wj.Value, wj.ValueB64)
		switch {
		case wj.Delete && hasValue:
			return nil, badRequest("line %d: a delete has no value", line)
		case both:
			return nil, badRequest("line %d: value and value_b64 are one value: give one", line)
		case !hasValue && !wj.Delete:
			return nil, badRequest("line %d: a put needs a value (value or value_b64; \"delete\": true to delete)", line)
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return nil, badRequest("no writes: the body is one JSON object per line")
	}
	return ws, nil
}

// pairJSON is one pair of a scan: key and value as strings when they are
// valid UTF-8, else base64 in key_b64 / value_b64.
type pairJSON struct {
	Key      string `json:"key,omitempty"`
	KeyB64   []byte `json:"key_b64,omitempty"`
	Value    string `json:"value"`
	ValueB64 []byte `json:"value_b64,omitempty"`
}

func (s *server) scan(w http.ResponseWriter, r *http.Request) {
	ro, err := readOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	limit := defaultScanLimit
	if l := r.URL.Query().Get("limit"); l != "" {
		limit, err = strconv.Atoi(l)
		if err != nil || limit < 1 || limit > maxScanLimit {
			writeError(w, http.StatusBadRequest, badRequest("?limit=%q: want 1 to %d", l, maxScanLimit))
			return
		}
	}
	q := r.URL.Query()
	var after []byte
	switch {
	case q.Has("after") && q.Has("after_b64"):
		writeError(w, http.StatusBadRequest, badRequest("?after= and ?after_b64= are one cursor: give one"))
		return
	case q.Has("after"):
		after = []byte(q.Get("after"))
	case q.Has("after_b64"):
		if after, err = base64.StdEncoding.DecodeString(q.Get("after_b64")); err != nil {
			writeError(w, http.StatusBadRequest, badRequest("?after_b64=%q: not base64", q.Get("after_b64")))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	kvs, more, err := s.n.ScanAfter(ctx, r.PathValue("ks"), []byte(q.Get("prefix")), after, limit, ro)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := struct {
		Pairs []pairJSON `json:"pairs"`
		More  bool       `json:"more"`
		// Next is the cursor of the next page when More: the last key,
		// for ?after= (NextB64 for ?after_b64= if it is not UTF-8).
		Next    string `json:"next,omitempty"`
		NextB64 []byte `json:"next_b64,omitempty"`
	}{Pairs: []pairJSON{}, More: more}
	if more && len(kvs) > 0 {
		if last := kvs[len(kvs)-1].Key; utf8.Valid(last) {
			out.Next = string(last)
		} else {
			out.NextB64 = last
		}
	}
	for _, kv := range kvs {
		var p pairJSON
		if utf8.Valid(kv.Key) {
			p.Key = string(kv.Key)
		} else {
			p.KeyB64 = kv.Key
		}
		if utf8.Valid(kv.Value) {
			p.Value = string(kv.Value)
		} else {
			p.ValueB64 = kv.Value
		}
		out.Pairs = append(out.Pairs, p)
	}
	writeJSON(w, out)
}

func (s *server) getBit(w http.ResponseWriter, r *http.Request) {
	ro, err := readOptions(r)
	var i uint64
	if err == nil {
		i, err = bitIndex(r)
	}
	var v bool
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		v, err = s.n.GetBit(ctx, r.PathValue("name"), i, ro)
	}
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if v {
		_, _ = io.WriteString(w, "1\n")
	} else {
		_, _ = io.WriteString(w, "0\n")
	}
}

// memberJSON is one entry of GET /members.
type memberJSON struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Role string `json:"role"` // "voter" or "learner"
}

func (s *server) listMembers(w http.ResponseWriter, r *http.Request) {
	st := s.n.Status()
	out := struct {
		Members []memberJSON `json:"members"`
	}{Members: []memberJSON{}}
	for _, id := range st.Voters {
		out.Members = append(out.Members, memberJSON{id, st.Members[id], "voter"})
	}
	for _, id := range st.Learners {
		out.Members = append(out.Members, memberJSON{id, st.Members[id], "learner"})
	}
	slices.SortFunc(out.Members, func(a, b memberJSON) int { return cmp.Compare(a.ID, b.ID) })
	writeJSON(w, out)
}

func (s *server) listNames(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Keyspaces []string `json:"keyspaces"`
		Bitslices []string `json:"bitslices"`
	}{Keyspaces: s.n.Keyspaces(), Bitslices: s.n.Bitslices()}
	if out.Keyspaces == nil {
		out.Keyspaces = []string{}
	}
	if out.Bitslices == nil {
		out.Bitslices = []string{}
	}
	writeJSON(w, out)
}

// raftStatus is the raft part of GET /status, first in its answer; kvraft
// status reads it back into its rows (endpointStatus).
type raftStatus struct {
	ID      uint64 `json:"id"`
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
}

// statusJSON is GET /status; field names are stable.
type statusJSON struct {
	raftStatus
	Watermark   uint64            `json:"watermark"`
	LogFirst    uint64            `json:"log_first"`
	LogLast     uint64            `json:"log_last"`
	Members     map[string]string `json:"members"`
	Voters      []uint64          `json:"voters"`
	Learners    []uint64          `json:"learners"`
	Engine      string            `json:"engine"`
	Error       string            `json:"error,omitempty"`
	Digest      string            `json:"digest,omitempty"`
	DigestIndex uint64            `json:"digest_index,omitempty"`
	Metrics     raftkv.Metrics    `json:"metrics"`
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	st := s.n.Status()
	out := statusJSON{
		raftStatus: raftStatus{
			ID: st.ID, Cluster: fmt.Sprintf("%016x", st.Cluster), State: st.State, Leader: st.Leader,
			Term: st.Term, Commit: st.Commit, Applied: st.Applied,
		},
		Watermark: st.Watermark,
		LogFirst:  st.LogFirst, LogLast: st.LogLast, Members: map[string]string{},
		Voters: append([]uint64{}, st.Voters...), Learners: append([]uint64{}, st.Learners...),
		Engine: st.Engine, Error: st.Err, Metrics: st.Metrics,
	}
	for id, addr := range st.Members {
		out.Members[strconv.FormatUint(id, 10)] = addr
	}
	switch r.URL.Query().Get("digest") {
	case "", "0":
	case "1":
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		idx, d, err := s.n.Digest(ctx)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		out.Digest, out.DigestIndex = d, idx
	default:
		writeError(w, http.StatusBadRequest, badRequest("?digest=%q: want 1 or 0", r.URL.Query().Get("digest")))
		return
	}
	writeJSON(w, out)
}

// healthJSON is GET /health.
type healthJSON struct {
	Healthy  bool     `json:"healthy"`
	ID       uint64   `json:"id"`
	State    string   `json:"state"`
	Leader   uint64   `json:"leader"`
	Term     uint64   `json:"term"`
	Commit   uint64   `json:"commit"`
	Applied  uint64   `json:"applied"`
	Problems []string `json:"problems"`
}

// health answers 200 if the node runs, knows a leader and has applied up
// to within --health-max-lag entries of its commit index, else 503 with
// the problems.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	out, code := healthOf(s.n.Status(), s.maxLag)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// healthOf is /health's answer and HTTP status for a node's status, with
// maxLag the bound on commit - applied.
func healthOf(st raftkv.Status, maxLag uint64) (healthJSON, int) {
	out := healthJSON{ID: st.ID, State: st.State, Leader: st.Leader, Term: st.Term, Commit: st.Commit, Applied: st.Applied, Problems: []string{}}
	if st.Err != "" {
		out.Problems = append(out.Problems, "stopped: "+st.Err)
	}
	if st.Leader == 0 {
		out.Problems = append(out.Problems, "no leader known")
	}
	if lag := st.Commit - min(st.Applied, st.Commit); lag > maxLag {
		out.Problems = append(out.Problems, fmt.Sprintf("applied index %d trails the commit index %d by %d entries (more than %d)", st.Applied, st.Commit, lag, maxLag))
	}
	out.Healthy = len(out.Problems) == 0
	if !out.Healthy {
		return out, http.StatusServiceUnavailable
	}
	return out, http.StatusOK
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, kvbuf.ErrEmptyKey), errors.Is(err, kvbuf.ErrKeyTooLarge),
		errors.Is(err, kvbuf.ErrBadRange), errors.Is(err, kvbuf.ErrBadName), errors.Is(err, kvbuf.ErrOutOfRange),
		errors.Is(err, kvbuf.ErrBadOptions):
		return http.StatusBadRequest
	case errors.Is(err, kvbuf.ErrNotFound), errors.Is(err, raftkv.ErrUnknownKeyspace), errors.Is(err, raftkv.ErrUnknownBitslice),
		errors.Is(err, raftkv.ErrNotMember):
		return http.StatusNotFound
	case errors.Is(err, raftkv.ErrMemberExists), errors.Is(err, raftkv.ErrRemovedID), errors.Is(err, raftkv.ErrLastVoter),
		errors.Is(err, raftkv.ErrNotCaughtUp):
		return http.StatusConflict
	case errors.Is(err, kvbuf.ErrValueTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, raftkv.ErrOutcomeUnknown):
		return http.StatusGatewayTimeout
	case errors.Is(err, raftkv.ErrNotLeader), errors.Is(err, raftkv.ErrProposalDropped), errors.Is(err, raftkv.ErrStopped),
		errors.Is(err, raftkv.ErrConfChangePending),
		errors.Is(err, raftkv.ErrRemoved), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, code int, err error) {
	msg := err.Error()
	if errors.Is(err, kvbuf.ErrNotFound) {
		msg = "not found"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// textOrB64 is a pipelined write's field given as text or in base64 (key
// and key_b64, value and value_b64): its bytes, whether it was given, and
// whether it was given twice.
func textOrB64(text *string, b64 []byte) (b []byte, given, both bool) {
	switch {
	case text != nil && b64 != nil:
		return nil, true, true
	case text != nil:
		return []byte(*text), true, false
	}
	return b64, b64 != nil, false
}
