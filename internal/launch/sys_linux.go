package launch

import (
	"os"
	"syscall"
)

// sysProcAttr puts each rank in its own process group, so that stopping a
// rank reaches the processes it started too, and makes the kernel kill the
// rank when the launcher dies without the chance to stop it (SIGKILL, a
// crash).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends s to the process group that p leads, or to p alone if
// that fails.
func signalGroup(p *os.Process, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok && p.Pid > 0 {
		if syscall.Kill(-p.Pid, sig) == nil {
			return
		}
	}
	p.Signal(s)
}
