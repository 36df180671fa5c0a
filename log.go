package goccl

import (
	"fmt"
	"os"
	"strings"
	"sync"
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
	lvl := strings.ToUpper(strings.TrimSpace(os.Getenv("GOCCL_DEBUG")))
	return &logger{rank: rank, info: lvl == "INFO" || lvl == "TRACE"}
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
