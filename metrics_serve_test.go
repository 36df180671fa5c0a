package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

var (
	metricsOnce            sync.Once
	metricsAddr, metricsAt string // GOCCL_METRICS_ADDR, and where it serves
	metricsErr             error
)

// startMetrics starts the process's /metrics server before any Init, on a
// free port moved up by local rank 1 (as Init would for that rank), trying
// again where another process took the port meanwhile.
func startMetrics() (addr, at string, err error) {
	var taken error
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // find a free port
		if err != nil {
			return "", "", err
		}
		addr = ln.Addr().String()
		ln.Close()
		at, err = goccl.ServeMetrics(addr, 1)
		if errors.Is(err, syscall.EADDRINUSE) {
			taken = err
			continue
		}
		if err != nil {
			return "", "", err
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if want := net.JoinHostPort(host, strconv.Itoa(p+1)); at != want {
			return "", "", fmt.Errorf("GOCCL_METRICS_ADDR=%s, local rank 1: served on %s, want %s", addr, at, want)
		}
		return addr, at, nil
	}
	return "", "", fmt.Errorf("5 free ports taken before the server bound them: %w", taken)
}

// TestMetricsServed: with GOCCL_METRICS_ADDR the process serves /metrics
// (one server per process, its port moved up by the local rank of the
// first to start it), and a scrape during a job returns the documented
// series with the operations counted so far.
func TestMetricsServed(t *testing.T) {
	metricsOnce.Do(func() { metricsAddr, metricsAt, metricsErr = startMetrics() })
	if metricsErr != nil {
		t.Fatal(metricsErr)
	}
	t.Setenv("GOCCL_METRICS_ADDR", metricsAddr)
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 16)
		for range 5 {
			if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			resp, err := http.Get("http://" + metricsAt + "/metrics")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			text := string(body)
			for _, want := range []string{
				`goccl_operations_total{comm=`, `op="AllReduce",rank="0"} 5`, `op="AllReduce",rank="1"} 5`,
				`goccl_operation_bytes_total{`, `goccl_operation_duration_seconds_bucket{`,
				`goccl_link_info{`, `transport="shm"} 1`, `go_goroutines`,
			} {
				if !strings.Contains(text, want) {
					return fmt.Errorf("/metrics lacks %q:\n%.3000s", want, text)
				}
			}
		}
		return c.Barrier(ctx)
	})
}
