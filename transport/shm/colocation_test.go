package shm

import (
	"context"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestColocatedWord(t *testing.T) {
	const ms = uint64(time.Millisecond)
	now := uint64(5000) * ms
	for _, c := range []struct {
		name string
		cpu  int
		peer uint64
		want bool
	}{
		{"nothing published", 0, 0, false},
		{"same CPU, fresh", 3, packCPU(3, now-ms/2), true},
		{"same CPU, just now", 0, packCPU(0, now), true},
		{"other CPU", 3, packCPU(2, now), false},
		{"same CPU, stale", 3, packCPU(3, now-2*ms), false},
		{"time past 2^48 ns", 1, packCPU(1, 1<<48+10), true}, // now below: the low 48 bits wrapped
	} {
		n := now
		if c.name == "time past 2^48 ns" {
			n = 1<<48 + 20
		}
		if got := colocated(c.cpu, n, c.peer); got != c.want {
			t.Errorf("%s: colocated = %v, want %v", c.name, got, c.want)
		}
	}
	if cpu, ns := unpackCPU(packCPU(65000, 12345)); cpu != 65000 || ns != 12345 {
		t.Errorf("unpack(pack(65000, 12345)) = %d, %d", cpu, ns)
	}
}

// TestColocatedSleep pins both ends of a link made WithYield(false) (each
// rank has a core) to one CPU and ping-pongs messages: every wait then finds
// the peer on its own CPU, and the waits sleep to leave it (which, pinned,
// they cannot: the test checks the detection, and that messages still flow).
func TestColocatedSleep(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}
	a, b := newPair(t, Config{SlotSize: 4096, Slots: 4}, WithYield(false))
	// pin locks the goroutine to its thread and the thread to cpu; the
	// goroutines never unlock, so their pinned threads exit with them.
	pin := func() {
		runtime.LockOSThread()
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Errorf("sched_setaffinity: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds = 200
	before := ColocatedSleeps()
	errc := make(chan error, 1)
	go func() {
		pin() // never unlocked: the thread, pinned, exits with the goroutine
		buf := make([]byte, 8)
		for i := range rounds {
			h := hdr(uint64(i+1), len(buf))
			if err := b.Recv(ctx, &h, buf, nil); err != nil {
				errc <- err
				return
			}
			if err := b.Send(ctx, &h, buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	done := make(chan error, 1)
	go func() {
		pin() // as above
		buf := make([]byte, 8)
		for i := range rounds {
			h := hdr(uint64(i+1), len(buf))
			if err := a.Send(ctx, &h, buf); err != nil {
				done <- err
				return
			}
			if err := a.Recv(ctx, &h, buf, nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := ColocatedSleeps() - before; n == 0 {
		t.Errorf("%d round trips on one CPU: no wait slept to leave it", rounds)
	} else {
		t.Logf("%d round trips on CPU %d: %d colocated sleeps", rounds, cpu, n)
	}
}
