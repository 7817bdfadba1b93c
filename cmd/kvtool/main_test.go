package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Regenerate the golden files with: go test ./cmd/kvtool -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const fixtures = "../../testdata/bitslice/"

// engineFixture is a small engine directory made by TestGenerateEngineFixture
// (go test ./cmd/kvtool -run GenerateEngineFixture -update).
const engineFixture = "testdata/engine"

func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		args []string
		exit int
	}{
		{"no-args", nil, 2},
		{"help", []string{"-h"}, 0},
		{"unknown-command", []string{"frobnicate"}, 2},
		{"inspect-help", []string{"inspect", "-h"}, 0},
		{"inspect-no-file", []string{"inspect"}, 2},
		{"inspect-two-files", []string{"inspect", fixtures + "valid.bits", fixtures + "torn.bits"}, 2},
		{"inspect-bad-flag", []string{"inspect", "--yaml", fixtures + "valid.bits"}, 2},
		{"inspect-valid", []string{"inspect", fixtures + "valid.bits"}, 0},
		{"inspect-valid-json", []string{"inspect", "--json", fixtures + "valid.bits"}, 0},
		{"inspect-valid-json-after", []string{"inspect", fixtures + "valid.bits", "-json"}, 0},
		{"inspect-torn", []string{"inspect", fixtures + "torn.bits"}, 0},
		{"inspect-torn-json", []string{"inspect", "--json", fixtures + "torn.bits"}, 0},
		{"inspect-truncated", []string{"inspect", fixtures + "truncated.bits"}, 1},
		{"inspect-badchecksum", []string{"inspect", fixtures + "badchecksum.bits"}, 1},
		{"inspect-badmagic", []string{"inspect", "--json", fixtures + "badmagic.bits"}, 1},
		{"inspect-foreign", []string{"inspect", "testdata/foreign.txt"}, 1},
		{"inspect-missing", []string{"inspect", "testdata/no-such-file"}, 1},
		{"inspect-directory", []string{"inspect", "testdata"}, 1},
		{"inspect-engine", []string{"inspect", engineFixture}, 0},
		{"inspect-engine-json", []string{"inspect", engineFixture, "--json"}, 0},
		{"inspect-engine-v1", []string{"inspect", engineFixture + "-v1"}, 0},
		{"inspect-manifest", []string{"inspect", engineFixture + "/KVBUF"}, 1},
		{"inspect-lock", []string{"inspect", engineFixture + "/LOCK"}, 1},
		{"checkpoint-help", []string{"checkpoint", "-h"}, 0},
		{"checkpoint-one-arg", []string{"checkpoint", engineFixture}, 2},
		{"checkpoint-missing", []string{"checkpoint", "testdata/no-such-dir", "testdata/no-such-dest"}, 1},
		{"checkpoint-not-engine", []string{"checkpoint", "testdata", "testdata/no-such-dest"}, 1},
		{"load-bad-keyspace", []string{"load", "--keyspace", "bad name", "testdata/no-such-dir"}, 2},
		{"load-bad-bits", []string{"load", "--bits", "..", "testdata/no-such-dir"}, 2},
		{"flush-help", []string{"flush", "-h"}, 0},
		{"flush-no-dir", []string{"flush"}, 2},
		{"flush-not-engine", []string{"flush", "testdata"}, 1},
		{"flush-missing", []string{"flush", "testdata/no-such-dir"}, 1},
		{"load-help", []string{"load", "-h"}, 0},
		{"load-no-dir", []string{"load", "-n", "5"}, 2},
		{"load-bad-n", []string{"load", "-n", "0", "testdata/no-such-dir"}, 2},
		{"load-bad-value-size", []string{"load", "-value-size", "-1", "testdata/no-such-dir"}, 2},
		{"load-not-engine", []string{"load", "-n", "5", "testdata"}, 1},
		{"bench-help", []string{"bench", "-h"}, 0},
		{"bench-arg", []string{"bench", "W1"}, 2},
		{"bench-bad-rounds", []string{"bench", "--rounds", "-1"}, 2},
		{"bench-bad-scale", []string{"bench", "--scale", "-3"}, 2},
		{"bench-no-match", []string{"bench", "--workload", "W9/*"}, 2},
		{"bench-no-match-star", []string{"bench", "--workload", "W9*"}, 2},
		{"bench-no-match-regexp", []string{"bench", "--workload", "^W9"}, 2},
		{"bench-zero-rounds", []string{"bench", "--rounds", "0"}, 2},
		{"bench-zero-rounds-quick", []string{"bench", "--quick", "--rounds", "0"}, 2},
		{"bench-zero-scale", []string{"bench", "--scale", "0"}, 2},
		{"bench-zero-per-goroutine", []string{"bench", "--per-goroutine", "0"}, 2},
		{"bench-zero-write-rate", []string{"bench", "--write-rate", "0"}, 2},
		{"bench-bad-cpu", []string{"bench", "--cpu", "1,x"}, 2},
		{"bench-bad-pattern", []string{"bench", "--workload", "W[1"}, 2},
		{"ycsb-help", []string{"ycsb", "-h"}, 0},
		{"ycsb-arg", []string{"ycsb", "a"}, 2},
		{"ycsb-bad-threads", []string{"ycsb", "--threads", "1,x"}, 2},
		{"ycsb-bad-db", []string{"ycsb", "--db", "kvbuf,rocksdb"}, 2},
		{"ycsb-bad-rounds", []string{"ycsb", "--rounds", "0"}, 2},
		{"ycsb-bad-records", []string{"ycsb", "--records", "-5"}, 2},
		{"ycsb-bad-prop-syntax", []string{"ycsb", "-p", "novalue"}, 2},
		{"ycsb-no-workload-file", []string{"ycsb", "--quick", "--workload", "testdata/no-such.properties"}, 2},
		{"ycsb-bad-workload-prop", []string{"ycsb", "--quick", "--db", "kvbuf", "-p", "requestdistribution=gaussian"}, 2},
		{"ycsb-bad-engine-prop", []string{"ycsb", "--quick", "--db", "kvbuf", "--workload", "c", "-p", "kvbuf.flush_interval=soon"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.exit {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.exit, stderr.String())
			}
			if code != 0 {
				// Errors are one line, never a stack trace, never on stdout.
				if n := strings.Count(stderr.String(), "\n"); n != 1 || stdout.Len() != 0 {
					t.Errorf("error output: %d stderr lines, %d stdout bytes; want 1 and 0", n, stdout.Len())
				}
			}
			got := fmt.Sprintf("exit %d\n-- stdout --\n%s-- stderr --\n%s", code, stdout.String(), stderr.String())
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (rerun with -update if intended):\n%s", golden, got)
			}
		})
	}
}
