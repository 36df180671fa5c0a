package goccl_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

var (
	metricsAddrOnce sync.Once
	metricsAddr     string
)

// TestMetricsServed: with GOCCL_METRICS_ADDR the process serves /metrics,
// and a scrape during a job returns the documented series with the
// operations counted so far.
func TestMetricsServed(t *testing.T) {
	// The server is the process's, for the first address it was given.
	metricsAddrOnce.Do(func() {
		if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil { // find a free port
			metricsAddr = ln.Addr().String()
			ln.Close()
		}
	})
	addr := metricsAddr
	if addr == "" {
		t.Skip("no loopback port")
	}
	t.Setenv("GOCCL_METRICS_ADDR", addr)
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
			// One server per process, its port moved up by the local rank of
			// the first communicator to start it (here either goroutine rank).
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			resp, err := http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(p)) + "/metrics")
			if err != nil {
				resp, err = http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(p+1)) + "/metrics")
			}
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
