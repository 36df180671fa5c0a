//go:build !linux

package ptytest

import (
	"errors"
	"os"
)

func open() (master, tty *os.File, err error) {
	return nil, nil, errors.New("pseudo-terminals are opened on Linux only")
}
