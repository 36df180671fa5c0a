package shm

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared (not private) futex operations: the word lives in a MAP_SHARED file
// mapping and the other waiter/waker is usually another process.
const (
	opFutexWait = 0 // FUTEX_WAIT
	opFutexWake = 1 // FUTEX_WAKE

	wakeAll = 1<<31 - 1
)

// futexTimeout bounds every sleep so that ctx cancellation is noticed. The
// kernel only reads it.
var futexTimeout = unix.Timespec{Nsec: int64(futexSleep)}

// futexWait sleeps while *w == val, for at most futexTimeout. Spurious returns
// (EAGAIN, EINTR, ETIMEDOUT) are fine: callers re-check their condition.
func futexWait(w *atomic.Uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opFutexWait, uintptr(val),
		uintptr(unsafe.Pointer(&futexTimeout)), 0, 0)
}

// futexWake wakes up to n waiters sleeping on w.
func futexWake(w *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opFutexWake, uintptr(n), 0, 0, 0)
}
