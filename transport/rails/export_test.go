package rails

import "fmt"

// DebugState describes the lanes' counters (tests' failure messages).
func (l *Link) DebugState() string {
	s := ""
	for _, ln := range l.lanes {
		ln.out.mu.Lock()
		s += fmt.Sprintf("lane %d: next %d sent %d acked %d entries %d ring %d [%d,%d) wrapped %v end %d; consumed %d ackSent %d wanted %v asked %v\n",
			ln.i, ln.out.next, ln.out.sent, ln.acked.Load(), ln.out.n, len(ln.out.ring), ln.out.rhead, ln.out.rtail, ln.out.wrapped, ln.out.rend,
			ln.consumed.Load(), ln.ackSent, ln.ackWanted.Load(), ln.asked.Load())
		ln.out.mu.Unlock()
	}
	return s
}
