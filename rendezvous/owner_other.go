//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package rendezvous

import "io/fs"

// ownedByMe cannot tell file owners apart on this platform: it accepts any.
func ownedByMe(fs.FileInfo) bool { return true }
