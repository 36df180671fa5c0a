//go:build !amd64 || purego

package reduce

// archInit has no accelerated kernels to offer outside amd64.
func archInit() {}
