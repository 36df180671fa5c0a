package goccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// TestInitBadTransportEnv: a bad value of a transport's variable (read by
// the transport itself, in internal/bootstrap) fails Init before any link
// is made, with ErrInvalidArgument naming the variable and the value.
func TestInitBadTransportEnv(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"GOCCL_SHM_DISABLE", "maybe"},
		{"GOCCL_NSOCKS_PERPEER", "0"},
		{"GOCCL_NET", "pigeon"},
		{"GOCCL_IB_RETRY_CNT", "9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			store := rendezvous.NewMemStore()
			defer store.Close()
			// Rank 1 never comes: only a failure before the links ends Init.
			_, err := goccl.Init(context.Background(), goccl.WithRank(0), goccl.WithWorldSize(2),
				goccl.WithStore(store), goccl.WithTimeout(time.Minute))
			if !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.value) {
				t.Fatalf("Init with %s=%s: %v, want ErrInvalidArgument naming both", tc.name, tc.value, err)
			}
		})
	}
}
