package testutil

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	r := NewReporter(&buf)
	r.Ready(11)
	r.Promise(74)
	r.Flushed(12, 14)
	r.Max("inflight", 3)
	r.Flushed(9, 20) // a lower watermark does not lower the report's
	r.Max("inflight", 2)
	r.Promise(138)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	readyCalls := 0
	rep, err := ReadReport(&buf, func() { readyCalls++ })
	if err != nil {
		t.Fatal(err)
	}
	if readyCalls != 1 {
		t.Fatalf("ready called %d times, want 1", readyCalls)
	}
	if !rep.Ready || rep.Start != 11 || rep.MaxOp != 138 || rep.AckedWM != 12 || rep.AckedDone != 20 ||
		rep.Flushes != 2 || rep.Max["inflight"] != 3 || rep.Lines != 7 {
		t.Fatalf("report = %+v", rep)
	}
}

func TestReportNoLines(t *testing.T) {
	readyCalls := 0
	rep, err := ReadReport(strings.NewReader(""), func() { readyCalls++ })
	if err != nil || readyCalls != 1 || rep.Ready || rep.Lines != 0 {
		t.Fatalf("empty input: %+v, %v, ready called %d times", rep, err, readyCalls)
	}
}

func TestReportRejects(t *testing.T) {
	for _, in := range []string{
		"W 5\n",                 // before R
		"R 1\nR 2\n",            // second R
		"R 0\n",                 // ops start at 1
		"R 1\nW 9\nW 8\n",       // promise going back
		"R 1\nW 9\nF 3 10\n",    // flush covering an op never promised
		"R 1\nX 3\n",            // unknown kind
		"R 1\nW\n",              // missing field
		"R 1\nF 3\n",            // missing field
		"R 1\nW 12x\n",          // not a number
		"R 1\nM inflight\n",     // missing value
		"R 1\n\n",               // empty line
		"R 1\nW 9 9\n",          // extra field
		"R 1\nW -1\n",           // negative
		"R 1\nF 1 2 3\nW 100\n", // extra field, then more lines
	} {
		if _, err := ReadReport(strings.NewReader(in), nil); err == nil {
			t.Errorf("ReadReport(%q) accepted it", in)
		}
	}
}
