//go:build !amd64 || race

package memcpy

import "unsafe"

const fast = false

func movsb(dst, src *byte, n int) { panic("memcpy: no REP MOVSB here") }

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
