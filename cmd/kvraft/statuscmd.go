package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
)

// runStatus implements kvraft status --endpoints HOST:PORT,...: it prints
// every node's role, term,
// commit index, applied index and lag (the highest commit index reported
// minus the node's applied index), one line per endpoint, as etcdctl
// endpoint status does. Exit 0 if every endpoint answered and runs, 1
// otherwise (the rows say why, and one line on stderr counts them), 2 on a
// usage error.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvraft status", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "the nodes to ask, HOST:PORT,... (required)")
	asJSON := fs.Bool("json", false, "print one JSON object per endpoint instead of a table")
	cf := addClientFlags(fs)
	if code, ok := parseCommand(fs, args, statusHelp, stdout, stderr); !ok {
		return code
	}
	var addrs []string
	for _, a := range strings.Split(*endpoints, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return usageErr(fs, stderr, "--endpoints is required")
	}
	ac, err := cf.client()
	if err != nil {
		return usageErr(fs, stderr, "%v", err)
	}
	rows := make([]endpointStatus, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i] = fetchStatus(ctx, ac, a)
		}()
	}
	wg.Wait()
	var maxCommit uint64
	for _, r := range rows {
		if r.Err == "" {
			maxCommit = max(maxCommit, r.Commit)
		}
	}
	code := exitOK
	for i := range rows {
		r := &rows[i]
		if r.Err != "" {
			code = exitError
			continue
		}
		r.Lag = maxCommit - min(r.Applied, maxCommit)
		if r.Error != "" {
			code = exitError
		}
	}
	defer func() {
		if code == exitError {
			fmt.Fprintf(stderr, "kvraft status: %s\n", statusProblem(rows))
		}
	}()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			_ = enc.Encode(r)
		}
		return code
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tID\tROLE\tTERM\tCOMMIT\tAPPLIED\tLAG\tLEADER\tCLUSTER\tERROR")
	for _, r := range rows {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t-\tunreachable\t-\t-\t-\t-\t-\t-\t%s\n", r.Endpoint, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Endpoint, r.ID, r.State, r.Term, r.Commit, r.Applied, r.Lag, r.Leader, r.Cluster, r.Error)
	}
	_ = tw.Flush()
	return code
}

// statusProblem says in one line how many of rows were unreachable or
// stopped, with a hint for a plain HTTP request to a node that serves
// HTTPS (the client needs --cacert).
func statusProblem(rows []endpointStatus) string {
	var unreachable, stopped int
	hint := ""
	for _, r := range rows {
		switch {
		case r.Err != "":
			unreachable++
			if hint == "" && strings.Contains(r.Err, "HTTP request to an HTTPS server") {
				hint = fmt.Sprintf(" (%s serves HTTPS: give --cacert)", r.Endpoint)
			}
		case r.Error != "":
			stopped++
		}
	}
	return fmt.Sprintf("%d of %d endpoints unreachable, %d stopped%s", unreachable, len(rows), stopped, hint)
}

// endpointStatus is one row of kvraft status: the node's /status, or why
// it could not be read.
type endpointStatus struct {
	Endpoint string `json:"endpoint"`
	raftStatus
	Lag   uint64 `json:"lag"`
	Error string `json:"error,omitempty"` // the error that stopped the node
	Err   string `json:"unreachable,omitempty"`
}

func fetchStatus(ctx context.Context, ac *apiClient, addr string) endpointStatus {
	row := endpointStatus{Endpoint: addr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ac.url(addr, "/status"), nil)
	if err != nil {
		row.Err = err.Error()
		return row
	}
	resp, err := ac.do(req)
	if err != nil {
		row.Err = err.Error()
		return row
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		row.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return row
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&row); err != nil {
		row.Err = fmt.Sprintf("bad /status answer: %v", err)
	}
	row.Endpoint = addr
	return row
}

// statusHelp is kvraft status -h's text; the flags follow it.
const statusHelp = `Usage: kvraft status --endpoints HOST:PORT,... [flags]

Prints every node's role, term, commit index, applied index and lag.

Flags:
`
