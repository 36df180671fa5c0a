//go:build !linux

package launch

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, s os.Signal) { p.Signal(s) }
