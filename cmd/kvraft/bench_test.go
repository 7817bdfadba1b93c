package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkW9HTTP is W9's one-client row through kvraft's HTTP API (a
// 3-node cluster of in-process kvraft nodes on loopback, 20 ms ticks): one
// client writing 100-byte values to new keys on the leader, either one PUT
// per write, waiting for each (put), or pipelined, 64 writes per POST
// /kv/{ks} (pipelined-64). One op is one acknowledged write; writes/s is
// the metric. The written keys are read back after the clock stops.
//
// go test -run '^$' -bench BenchmarkW9HTTP ./cmd/kvraft
func BenchmarkW9HTTP(b *testing.B) {
	for _, depth := range []int{1, 64} {
		name := "put"
		if depth > 1 {
			name = fmt.Sprintf("pipelined-%d", depth)
		}
		b.Run(name, func(b *testing.B) { w9HTTP(b, depth) })
	}
}

func w9HTTP(b *testing.B, depth int) {
	_, addrs := startCluster(b)
	lead := waitLeader(b, addrs)
	if got := call(b, "PUT", "http://"+lead+"/keyspaces/ks", nil); got.code != 204 {
		b.Fatalf("PUT /keyspaces/ks: %+v", got)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	value := strings.Repeat("v", 100)
	seq := 0
	do := func(method, url string, body []byte) string {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: HTTP %d %s", method, url, resp.StatusCode, out)
		}
		return string(out)
	}
	write := func(k int) {
		if k == 1 {
			seq++
			do("PUT", fmt.Sprintf("http://%s/kv/ks/key%013d", lead, seq), []byte(value))
			return
		}
		var body bytes.Buffer
		for range k {
			seq++
			fmt.Fprintf(&body, "{\"key\":\"key%013d\",\"value\":%q}\n", seq, value)
		}
		out := do("POST", "http://"+lead+"/kv/ks", body.Bytes())
		if n := strings.Count(out, `{"status":204}`); n != k {
			b.Fatalf("%d of %d writes applied: %s", n, k, out)
		}
	}
	write(1)
	start := time.Now()
	n := 0
	for b.Loop() {
		if n%depth == 0 {
			write(depth)
		}
		n++
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "writes/s")
	b.StopTimer()
	// Read back a sample.
	for i := 1; i <= seq; i += max(seq/100, 1) {
		if got := do("GET", fmt.Sprintf("http://%s/kv/ks/key%013d", lead, i), nil); got != value {
			b.Fatalf("key %d: %q", i, got)
		}
	}
}
