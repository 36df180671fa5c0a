//go:build !race

package memcpy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var fast = cpu.X86.HasERMS

// movsb copies n bytes from src to dst with REP MOVSB (n > 0, no overlap).
//
//go:noescape
func movsb(dst, src *byte, n int)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
