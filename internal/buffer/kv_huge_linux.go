package buffer

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the platforms Go
// supports with them (amd64, arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the 2 MiB-aligned interior of a
// large slot-array slice with transparent huge pages (madvise
// MADV_HUGEPAGE; effective when /sys/kernel/mm/transparent_hugepage/enabled
// is "madvise" or "always"). A put and the flush's reads in key order
// each touch a random slot: with 4 KiB pages each is a TLB miss as well as
// a cache miss, and a page walk of its own under a hypervisor's nested
// paging. The advice changes no contents and the Go heap keeps owning the
// memory; an error (an old kernel, THP off) leaves the pages as they are.
func adviseHuge(s []uint64) {
	if len(s)*8 < 2*hugePage {
		return
	}
	base := unsafe.Pointer(unsafe.SliceData(s))
	p := uintptr(base)
	lo := (p + hugePage - 1) &^ (hugePage - 1)
	hi := (p + uintptr(len(s))*8) &^ (hugePage - 1)
	if hi <= lo {
		return
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(base, lo-p)), hi-lo), unix.MADV_HUGEPAGE)
}
