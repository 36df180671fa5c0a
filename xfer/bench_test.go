package xfer

import (
	"context"
	"testing"
)

// BenchmarkCreateXferReq: preparing both lists and making a request of
// 1024 descriptors of 64 KiB (a KV-cache hand-over's shape).
func BenchmarkCreateXferReq(b *testing.B) {
	ini, tgt := pair(b, Options{NoSHM: true})
	const n = 1024
	src, dst := make([]byte, n<<16), make([]byte, n<<16)
	sd, _ := ini.RegisterDRAM(src)
	td, _ := tgt.RegisterDRAM(dst)
	load(b, ini, tgt)
	ld, rd := make([]Desc, n), make([]Desc, n)
	for i := range n {
		ld[i] = sd.Sub(uint64(i)<<16, 1<<16)
		rd[i] = td.Sub(uint64(n-1-i)<<16, 1<<16)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := ini.CreateXferReq(ctx, READ, DRAM, ld, "tgt", DRAM, rd, nil)
		if err != nil {
			b.Fatal(err)
		}
		ini.ReleaseXferReq(r)
	}
}
