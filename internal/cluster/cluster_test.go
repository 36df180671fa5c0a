package cluster_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want cluster.Rate
		str  string
	}{
		{"100mbit", 100e6, "100mbit"},
		{"1gbit", 1e9, "1gbit"},
		{"1GBit", 1e9, "1gbit"},
		{"10gbit", 10e9, "10gbit"},
		{"1.5mbit", 1.5e6, "1500kbit"},
		{"125mbps", 1e9, "1gbit"},
		{"1kibit", 1024, "1024bit"},
		{"1mibps", 8 << 20, "8388608bit"},
		{"8000", 8000, "8kbit"},
		{"12345bit", 12345, "12345bit"},
		{"0", 0, "0"},
		{"", 0, "0"},
		{"1tbit", 1e12, "1tbit"},
	} {
		got, err := cluster.ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.str {
			t.Errorf("ParseRate(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
		back, err := cluster.ParseRate(got.String())
		if err != nil || back != got {
			t.Errorf("ParseRate(%q) = %d, %v: does not read its String back", got.String(), back, err)
		}
	}
	for _, in := range []string{"fast", "mbit", "-1mbit", "1.2.3mbit", "1 gbit/s", "4bit", "1e30gbit", "NaNbit", "inf"} {
		if r, err := cluster.ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, r)
		}
	}
}

func TestNormalize(t *testing.T) {
	c, err := cluster.Config{Hosts: 4}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != cluster.DefaultName || c.MTU != 1500 || c.Subnet != cluster.DefaultSubnet || c.StateDir != cluster.DefaultStateDir {
		t.Errorf("defaults: %+v", c)
	}
	c, err = cluster.Config{Hosts: 2, Subnet: netip.MustParsePrefix("10.7.3.9/16")}.Normalize()
	if err != nil || c.Subnet.String() != "10.7.0.0/16" {
		t.Errorf("subnet not masked: %v %v", c.Subnet, err)
	}
	for _, bad := range []struct {
		cfg  cluster.Config
		want string
	}{
		{cluster.Config{}, "number of hosts 0"},
		{cluster.Config{Hosts: 255}, "1 to 254"},
		{cluster.Config{Hosts: 3, Subnet: netip.MustParsePrefix("10.0.0.0/31")}, "subnet"},
		{cluster.Config{Hosts: 3, Subnet: netip.MustParsePrefix("fd00::/64")}, "subnet"},
		{cluster.Config{Hosts: 3, Subnet: netip.MustParsePrefix("10.0.0.0/30")}, "1 to 2"},
		{cluster.Config{Hosts: 1, Name: "a b"}, "name"},
		{cluster.Config{Hosts: 1, Name: "-x"}, "name"},
		{cluster.Config{Hosts: 1, Name: strings.Repeat("x", 65)}, "name"},
		{cluster.Config{Hosts: 1, MTU: 60}, "MTU"},
		{cluster.Config{Hosts: 1, Delay: -time.Millisecond}, "negative"},
		{cluster.Config{Hosts: 1, Delay: 1500 * time.Nanosecond}, "microseconds"},
		{cluster.Config{Hosts: 1, Jitter: time.Millisecond}, "jitter"},
		{cluster.Config{Hosts: 1, Loss: 101}, "loss"},
		{cluster.Config{Hosts: 1, Queue: 1 << 20}, "needs a rate"},
		{cluster.Config{Hosts: 1, Rate: 100e6, Queue: -1}, "invalid queue"},
		{cluster.Config{Hosts: 1, PortQueue: 1 << 20}, "needs a rate"},
	} {
		if _, err := bad.cfg.Normalize(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one with %q", bad.cfg, err, bad.want)
		}
	}
}

func TestPlan(t *testing.T) {
	cfg, err := cluster.Config{Name: "x", Hosts: 3, Subnet: netip.MustParsePrefix("10.9.0.0/16"), StateDir: "/tmp/s"}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.Plan(cfg)
	if c.Switch != "x-sw" || c.StateFile != "/tmp/s/cluster-x.json" || len(c.Hosts) != 3 {
		t.Fatalf("plan: %+v", c)
	}
	for i, want := range []string{"x-h0 10.9.0.1 eth0 p0", "x-h1 10.9.0.2 eth0 p1", "x-h2 10.9.0.3 eth0 p2"} {
		h := c.Hosts[i]
		if got := strings.Join([]string{h.Name, h.Addr.String(), h.Iface, h.Port}, " "); got != want {
			t.Errorf("host %d: %s, want %s", i, got, want)
		}
	}
	if got := strings.Join(c.Hosts[1].ExecPrefix(), " "); got != "ip netns exec x-h1" {
		t.Errorf("ExecPrefix: %s", got)
	}
	if got, want := c.Hostfile(4), "x-h0 slots=4\nx-h1 slots=4\nx-h2 slots=4\n"; got != want {
		t.Errorf("Hostfile: %q, want %q", got, want)
	}
}

func TestOwns(t *testing.T) {
	for _, c := range []struct {
		name, ns string
		want     bool
	}{
		{"a", "a-sw", true},
		{"a", "a-h0", true},
		{"a", "a-h12", true},
		{"a", "a-h", false},
		{"a", "a-h01", false},
		{"a", "a-h1x", false},
		{"a", "a-b-h0", false},
		{"a", "ab-h0", false},
		{"a-b", "a-b-h0", true},
		{"a", "a-sw2", false},
		{"gct12-1", "gct12-10-h0", false},
	} {
		if got := cluster.Owns(c.name, c.ns); got != c.want {
			t.Errorf("Owns(%q, %q) = %v", c.name, c.ns, got)
		}
	}
}

func TestShapingParameters(t *testing.T) {
	cfg, _ := cluster.Config{Hosts: 2, Rate: 100e6, Delay: 5 * time.Millisecond}.Normalize()
	c := cluster.Plan(cfg)
	// 100 Mbit/s: 2 ms is 25 kB, under the 128 KiB floor; the queue holds
	// 2×5 ms + 20 ms = 30 ms of the rate, 375 kB, but at least 4 bursts.
	if got, want := strings.Join(c.TBF(), " "), "tbf rate 100mbit burst 131072 limit 524288"; got != want {
		t.Errorf("tbf: %s, want %s", got, want)
	}
	// 2 × 12.5 MB/s × 5 ms / 256 B = 488 packets: netem's 1000.
	if got := c.NetemLimit(); got != 1000 {
		t.Errorf("netem limit %d, want 1000", got)
	}
	// A queue given: tbf's limit, whatever the delay.
	cfg.Queue = 2 << 20
	if got, want := strings.Join(cluster.Plan(cfg).TBF(), " "), "tbf rate 100mbit burst 131072 limit 2097152"; got != want {
		t.Errorf("tbf with a queue: %s, want %s", got, want)
	}
	// A port queue: the switch ports' alone; the egress keeps the queue.
	cfg.PortQueue = 64 << 10
	if got, want := strings.Join(cluster.Plan(cfg).PortTBF(), " "), "tbf rate 100mbit burst 131072 limit 65536"; got != want {
		t.Errorf("port tbf with a port queue: %s, want %s", got, want)
	}
	if got, want := strings.Join(cluster.Plan(cfg).TBF(), " "), "tbf rate 100mbit burst 131072 limit 2097152"; got != want {
		t.Errorf("egress tbf with a port queue: %s, want %s", got, want)
	}
	cfg.PortQueue = 0
	cfg, _ = cluster.Config{Hosts: 2, Rate: 10e9, Delay: 10 * time.Millisecond}.Normalize()
	c = cluster.Plan(cfg)
	if got, want := strings.Join(c.TBF(), " "), "tbf rate 10gbit burst 2500000 limit 50000000"; got != want {
		t.Errorf("tbf: %s, want %s", got, want)
	}
	if got, want := c.NetemLimit(), 97656; got != want {
		t.Errorf("netem limit %d, want %d", got, want)
	}
	if got, want := cfg.Shaping(), "rate 10gbit each way per host, delay 10ms one way host to host, loss 0%, mtu 1500"; got != want {
		t.Errorf("Shaping: %q, want %q", got, want)
	}
}

// TestUpRefusals: Up's own checks come before any command.
func TestUpRefusals(t *testing.T) {
	ctx := context.Background()
	restore := cluster.SetGeteuid(func() int { return 1000 })
	_, err := cluster.Up(ctx, cluster.Config{Hosts: 2, StateDir: t.TempDir()})
	if !errors.Is(err, cluster.ErrNotRoot) || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("not root: %v", err)
	}
	if _, err := cluster.Down(ctx, "x", t.TempDir()); !errors.Is(err, cluster.ErrNotRoot) {
		t.Errorf("Down, not root: %v", err)
	}
	restore()
	restore = cluster.SetGeteuid(func() int { return 0 })
	defer restore()
	t.Setenv("PATH", t.TempDir())
	if _, err := cluster.Up(ctx, cluster.Config{Hosts: 2, StateDir: t.TempDir()}); !errors.Is(err, cluster.ErrNoIP) || !strings.Contains(err.Error(), "apt-get install iproute2") {
		t.Errorf("no ip: %v", err)
	}
	if _, err := cluster.Down(ctx, "x", t.TempDir()); !errors.Is(err, cluster.ErrNoIP) {
		t.Errorf("Down without ip: %v", err)
	}
	if _, err := cluster.Up(ctx, cluster.Config{Hosts: 0}); err == nil || !strings.Contains(err.Error(), "number of hosts") {
		t.Errorf("0 hosts: %v", err)
	}
}

// TestRPSMask checks the rps_cpus masks that keep a veth's flows in order.
func TestRPSMask(t *testing.T) {
	for _, tc := range []struct {
		first, n int
		want     string
	}{
		{0, 0, "1"}, {0, 1, "1"}, {0, 2, "3"}, {0, 4, "f"}, {0, 31, "7fffffff"}, {0, 32, "ffffffff"},
		{0, 33, "1,ffffffff"}, {0, 70, "3f,ffffffff,ffffffff"}, {1, 1, "2"}, {3, 1, "8"}, {32, 1, "1,00000000"}, {40, 1, "100,00000000"},
	} {
		if got := cluster.RPSMask(tc.first, tc.n); got != tc.want {
			t.Errorf("RPSMask(%d, %d) = %q, want %q", tc.first, tc.n, got, tc.want)
		}
	}
}
