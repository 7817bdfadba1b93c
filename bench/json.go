package bench

import "fmt"

// JSONRow is one row as kvtool bench --json prints it and
// scripts/benchtable reads it; doc/workloads.md ("Output") describes the
// fields. Optional figures are pointers, left out when the row has none.
// The ratio maps are keyed by baseline: RatioVs holds the median of the
// per-round ratios (Row.Ratios), RatioVsMin and RatioVsMax their extremes,
// RatioVsNoisy the baselines whose ratio is noisy, CPURatioVs the median
// per-round ratio of CPU time per operation, DiskRatioVs the ratio of
// bytes written to disk per user byte over all rounds (Ratio.Disk).
// DiskBytesPerUserByte is the row's figure over all rounds (total disk
// bytes over total user bytes, Row.DiskPerUserByte),
// DiskPerUserByteRounds each round's. BusyRounds (Row.BusyRounds) counts
// the rounds whose quiesce or settle step found a store still busy at its
// deadline, left out when none did.
type JSONRow struct {
	Workload               string             `json:"workload"`
	Impl                   string             `json:"impl"`
	Unit                   string             `json:"unit"`
	Goroutines             int                `json:"goroutines"`
	NsPerOp                float64            `json:"ns_per_op"`
	NsPerOpMin             float64            `json:"ns_per_op_min"`
	NsPerOpMax             float64            `json:"ns_per_op_max"`
	Noisy                  bool               `json:"noisy,omitempty"`
	AllocsPerOp            float64            `json:"allocs_per_op"`
	Rounds                 int                `json:"rounds"`
	OpsPerRound            int                `json:"ops_per_round"`
	Floor                  bool               `json:"floor,omitempty"`
	Label                  string             `json:"label,omitempty"`
	CPUNsPerOp             *float64           `json:"cpu_ns_per_op,omitempty"`
	ReadBack               int64              `json:"read_back,omitempty"`
	RatioVs                map[string]float64 `json:"ratio_vs,omitempty"`
	RatioVsMin             map[string]float64 `json:"ratio_vs_min,omitempty"`
	RatioVsMax             map[string]float64 `json:"ratio_vs_max,omitempty"`
	RatioVsNoisy           map[string]bool    `json:"ratio_vs_noisy,omitempty"`
	CPURatioVs             map[string]float64 `json:"cpu_ratio_vs,omitempty"`
	DiskBytesPerUserByte   *float64           `json:"disk_bytes_per_user_byte,omitempty"`
	DiskPerUserByteRounds  []float64          `json:"disk_bytes_per_user_byte_rounds,omitempty"`
	DiskRatioVs            map[string]float64 `json:"disk_ratio_vs,omitempty"`
	BusyRounds             int                `json:"busy_rounds,omitempty"`
	BytesPerEntry          *float64           `json:"bytes_per_entry,omitempty"`
	AccountedBytesPerEntry *float64           `json:"accounted_bytes_per_entry,omitempty"`
	Flushes                *int64             `json:"flushes,omitempty"`
	SyncsPerFlush          *float64           `json:"syncs_per_flush,omitempty"`
	Violations             *int64             `json:"violations,omitempty"`
	P50FlushNs             *float64           `json:"p50_flush_ns,omitempty"`
	P99FlushNs             *float64           `json:"p99_flush_ns,omitempty"`
	P999FlushNs            *float64           `json:"p999_flush_ns,omitempty"`
	ReadsPerSec            *float64           `json:"reads_per_sec,omitempty"`
	WritesPerSec           *float64           `json:"writes_per_sec,omitempty"`
	P50ReadNs              *float64           `json:"p50_read_ns,omitempty"`
	P99ReadNs              *float64           `json:"p99_read_ns,omitempty"`
	P99ReadFlushNs         *float64           `json:"p99_read_flush_ns,omitempty"`
	P99WriteNs             *float64           `json:"p99_write_ns,omitempty"`
	EngineMinShare         *float64           `json:"engine_min_share,omitempty"`
	EngineMaxShare         *float64           `json:"engine_max_share,omitempty"`
	EngineMinLat           *float64           `json:"engine_min_lat,omitempty"`
	EngineMaxLat           *float64           `json:"engine_max_lat,omitempty"`
	BudgetPeak             *float64           `json:"budget_peak,omitempty"`
	BudgetGen              *float64           `json:"budget_gen,omitempty"`
	BudgetOverGen          *float64           `json:"budget_over_gen,omitempty"`
}

// JSON returns r as kvtool bench --json prints it.
func (r Row) JSON() JSONRow {
	j := JSONRow{
		Workload: r.Workload, Impl: r.Impl, Unit: r.Unit, Goroutines: r.Goroutines,
		NsPerOp: r.Median, NsPerOpMin: r.Min, NsPerOpMax: r.Max, Noisy: r.Noisy,
		AllocsPerOp: r.AllocsPerOp, Rounds: r.Rounds, OpsPerRound: r.OpsPerRound,
		Floor: r.Floor, Label: r.Label, ReadBack: r.ReadBack, RatioVs: r.RatioVs,
		BusyRounds: r.BusyRounds,
	}
	if len(r.CPUNsPerOp) > 0 {
		j.CPUNsPerOp = &r.CPUPerOp
	}
	if len(r.DiskBytesPerUserByte) > 0 {
		j.DiskBytesPerUserByte, j.DiskPerUserByteRounds = &r.DiskPerUserByte, r.DiskBytesPerUserByte
	}
	for impl, ra := range r.Ratios {
		if j.RatioVsMin == nil {
			j.RatioVsMin, j.RatioVsMax, j.RatioVsNoisy = map[string]float64{}, map[string]float64{}, map[string]bool{}
		}
		j.RatioVsMin[impl], j.RatioVsMax[impl] = ra.Min, ra.Max
		if ra.Noisy {
			j.RatioVsNoisy[impl] = true
		}
		if ra.CPU > 0 {
			if j.CPURatioVs == nil {
				j.CPURatioVs = map[string]float64{}
			}
			j.CPURatioVs[impl] = ra.CPU
		}
		if ra.Disk > 0 {
			if j.DiskRatioVs == nil {
				j.DiskRatioVs = map[string]float64{}
			}
			j.DiskRatioVs[impl] = ra.Disk
		}
	}
	if len(j.RatioVsNoisy) == 0 {
		j.RatioVsNoisy = nil
	}
	if r.BytesPerEntry != 0 {
		j.BytesPerEntry = &r.BytesPerEntry
	}
	if r.AccountedBytesPerEntry != 0 {
		j.AccountedBytesPerEntry = &r.AccountedBytesPerEntry
	}
	if r.Flushes > 0 {
		spf := r.SyncsPerFlush()
		j.Flushes, j.SyncsPerFlush, j.Violations = &r.Flushes, &spf, &r.Violations
		j.P50FlushNs, j.P99FlushNs, j.P999FlushNs = &r.P50FlushNs, &r.P99FlushNs, &r.P999FlushNs
	}
	if r.ReadsPerSec > 0 {
		j.ReadsPerSec, j.WritesPerSec = &r.ReadsPerSec, &r.WritesPerSec
		j.P50ReadNs, j.P99ReadNs, j.P99ReadFlushNs, j.P99WriteNs = &r.P50ReadNs, &r.P99ReadNs, &r.P99ReadFlushNs, &r.P99WriteNs
	}
	if r.BudgetPeak > 0 {
		j.EngineMinShare, j.EngineMaxShare, j.BudgetPeak, j.BudgetGen, j.BudgetOverGen = &r.EngineMinShare, &r.EngineMaxShare, &r.BudgetPeak, &r.BudgetGen, &r.BudgetOverGen
		j.EngineMinLat, j.EngineMaxLat = &r.EngineMinLat, &r.EngineMaxLat
	}
	return j
}

// FormatNs formats a duration in nanoseconds with a unit and three
// significant digits ("3.64 ns", "1.2 ms"), as the tables print it.
func FormatNs(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns", ns)
}
