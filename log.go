package goccl

import (
	"fmt"
	"os"
	"sync"

	"github.com/goccl/goccl/internal/config"
)

// logger prints GOCCL_DEBUG output (like NCCL_DEBUG): WARN (default) prints
// warnings only; INFO adds the transport chosen per peer, the algorithm per
// operation kind and Init timings by phase.
type logger struct {
	rank int
	info bool
	mu   sync.Mutex
}

func newLogger(rank int) *logger {
	l := &logger{rank: rank, info: config.DebugInfo()}
	if _, err := config.Debug.Word(); err != nil {
		l.Warnf("%v; using WARN", err)
	}
	return l
}

func (l *logger) printf(level, format string, args ...any) {
	host, _ := os.Hostname()
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(os.Stderr, "%s:%d [rank %d] goccl %s %s\n", host, os.Getpid(), l.rank, level, fmt.Sprintf(format, args...))
}

func (l *logger) Infof(format string, args ...any) {
	if l.info {
		l.printf("INFO", format, args...)
	}
}

func (l *logger) Warnf(format string, args ...any) { l.printf("WARN", format, args...) }
