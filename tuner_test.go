package goccl

import (
	"strconv"
	"testing"

	"github.com/goccl/goccl/internal/config"
)

// TestConfigDefaults: the defaults goccl env shows are the ones Init uses.
func TestConfigDefaults(t *testing.T) {
	for _, c := range []struct {
		v    *config.Var
		want string
	}{
		{config.DirectMinBytes, strconv.Itoa(directMinBytes)},
		{config.NSocksPerPeer, strconv.Itoa(defaultNSocks)},
		{config.Timeout, DefaultTimeout.String()},
		{config.ProgressNice, strconv.Itoa(defaultProgressNice)},
	} {
		got := c.v.Default
		if c.v == config.Timeout {
			d, err := config.ParseDuration(got)
			if err != nil {
				t.Fatal(err)
			}
			got = d.String()
		}
		if got != c.want {
			t.Errorf("%s: internal/config's default %q, Init uses %q", c.v.Name, got, c.want)
		}
	}
}
