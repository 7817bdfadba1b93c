//go:build linux

package testutil

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mapping describes the memory mapping holding one address, from
// /proc/self/smaps: for experiments that compare how two set-ups' data
// are backed (huge pages, files).
type Mapping struct {
	Lo, Hi    uintptr // the mapping's range
	Name      string  // its file, or "" for anonymous memory
	AnonHugeK int     // AnonHugePages, in KiB
	FileHugeK int     // FilePmdMapped + ShmemPmdMapped, in KiB
	THP       bool    // THPeligible
	HugeAdv   bool    // VmFlags has hg (MADV_HUGEPAGE)
}

// String formats m on one line.
func (m Mapping) String() string {
	return fmt.Sprintf("[%#x-%#x %dKiB %q anonhuge=%dKiB filehuge=%dKiB eligible=%v hg=%v]",
		m.Lo, m.Hi, (m.Hi-m.Lo)>>10, m.Name, m.AnonHugeK, m.FileHugeK, m.THP, m.HugeAdv)
}

// MappingOf returns the mapping of the current process holding addr.
func MappingOf(addr uintptr) (Mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Mapping{}, fmt.Errorf("smaps: %w", err)
	}
	defer f.Close()
	var m Mapping
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if r := strings.SplitN(fields[0], "-", 2); len(r) == 2 && !strings.HasSuffix(fields[0], ":") {
			if in {
				return m, nil
			}
			lo, err1 := strconv.ParseUint(r[0], 16, 64)
			hi, err2 := strconv.ParseUint(r[1], 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			if uintptr(lo) <= addr && addr < uintptr(hi) {
				in = true
				m = Mapping{Lo: uintptr(lo), Hi: uintptr(hi)}
				if len(fields) >= 6 {
					m.Name = fields[5]
				}
			}
			continue
		}
		if !in {
			continue
		}
		kb := func() int {
			if len(fields) < 2 {
				return 0
			}
			n, _ := strconv.Atoi(fields[1])
			return n
		}
		switch fields[0] {
		case "AnonHugePages:":
			m.AnonHugeK = kb()
		case "FilePmdMapped:", "ShmemPmdMapped:":
			m.FileHugeK += kb()
		case "THPeligible:":
			m.THP = kb() == 1
		case "VmFlags:":
			for _, fl := range fields[1:] {
				if fl == "hg" {
					m.HugeAdv = true
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Mapping{}, fmt.Errorf("smaps: %w", err)
	}
	if !in {
		return Mapping{}, fmt.Errorf("smaps: no mapping holds %#x", addr)
	}
	return m, nil
}
