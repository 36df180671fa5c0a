package shm

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Colocation: when every rank of the host has a core (WithYield(false)),
// two ranks that wait on each other can still end up on one CPU, the other
// idle: each wait then ends by sched_yield handing the CPU to the peer,
// which never goes through the kernel's wake-up placement (the step that
// moves a woken thread to an idle CPU), so the pair stays there, trading
// one CPU at about 7 µs an operation instead of 0.3 µs on two (perf sched
// timehist: both ranks' threads switching only with each other on one CPU
// while the other ran nothing; docs/benchmarks.md). A waiter that reaches
// its first yield publishes its CPU and the time in the ring it consumes
// and compares them with the peer's, published the same way; after
// colocatedWaits such waits in a row that found the peer on its own CPU
// within colocatedFresh, it sleeps for colocatedSleep instead of yielding:
// the timer's wake-up places it on an idle CPU.
const (
	colocatedFresh   = time.Millisecond
	colocatedSleep   = 20 * time.Microsecond
	colocatedMaxSkip = 1024
)

// colocatedSleeps counts the sleeps taken to leave a peer's CPU, for tests
// and logs.
var colocatedSleeps atomic.Uint64

// ColocatedSleeps is how many times a wait of this process slept to leave
// the CPU its peer runs on (see colocation.go).
func ColocatedSleeps() uint64 { return colocatedSleeps.Load() }

// checkColocated publishes where this side waits and sleeps when the peer
// has kept waiting on the same CPU (see above).
func (l *link) checkColocated() {
	cpu, now, ok := cpuNow()
	if !ok {
		return
	}
	l.in.consumerCPU.Store(packCPU(cpu, now))
	if !colocated(cpu, now, l.out.consumerCPU.Load()) {
		l.colocBackoff.Store(1)
		return
	}
	if l.self < l.peer {
		return // the higher rank moves: the lower keeps this CPU busy meanwhile
	}
	if l.colocSkip.Add(-1) >= 0 {
		return
	}
	// A sleep that did not separate the pair is retried after twice as
	// many colocated waits, so a pair the kernel keeps together (affinity,
	// a busy other CPU) loses at most one sleep per colocatedMaxSkip waits.
	b := max(l.colocBackoff.Load(), 1)
	l.colocSkip.Store(b - 1)
	l.colocBackoff.Store(min(2*b, colocatedMaxSkip))
	colocatedSleeps.Add(1)
	ts := unix.NsecToTimespec(int64(colocatedSleep))
	unix.Nanosleep(&ts, nil)
}

// colocated reports whether the peer's word (packCPU) says it waited on cpu
// within colocatedFresh of now.
func colocated(cpu int, now, peer uint64) bool {
	pcpu, pt := unpackCPU(peer)
	return pcpu == cpu && (now-pt)&timeMask <= uint64(colocatedFresh)
}

// cpuNow is the CPU this thread runs on and CLOCK_MONOTONIC in ns (the same
// clock in every process of the host).
func cpuNow() (cpu int, ns uint64, ok bool) {
	var c uint32
	if _, _, e := syscall.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), 0, 0); e != 0 {
		return 0, 0, false
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0, 0, false
	}
	return int(c), uint64(ts.Nano()), true
}

// packCPU packs a CPU number (below 2^16) and a time in ns (its low 48 bits,
// about 78 hours: enough to tell a fresh publication from an old one) in one
// word; 0 means nothing published.
func packCPU(cpu int, ns uint64) uint64 { return ns<<16 | uint64(cpu+1)&0xffff }

// timeMask keeps the 48 bits of time a packed word holds.
const timeMask = 1<<48 - 1

func unpackCPU(w uint64) (cpu int, ns uint64) {
	if w == 0 {
		return -1, 0
	}
	return int(w&0xffff) - 1, w >> 16
}
