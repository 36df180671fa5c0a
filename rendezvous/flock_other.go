//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package rendezvous

import (
	"errors"
	"os"
)

// tryLock: FileStore.Add needs flock(2), which this platform lacks.
func tryLock(f *os.File) (bool, error) {
	return false, errors.New("rendezvous: file store Add needs flock, unsupported on this platform")
}

func unlock(f *os.File) {}
