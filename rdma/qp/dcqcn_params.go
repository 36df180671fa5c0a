package qp

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// dcqcnParams are the DCQCN parameters Set takes, by their mlx5 names
// (/sys/class/net/IF/ecn/roce_rp and roce_np), in mlx5's units: µs for the
// times (a Go duration such as 4ms is taken too), Mbit/s for the rates,
// 64-byte units for the byte reset, 1/1024 for g and α, percent for the
// smallest decrease.
var dcqcnParams = []struct {
	name, unit string
	set        func(p *DCQCN, v float64)
}{
	{"dce_tcp_g", "1/1024", func(p *DCQCN, v float64) { p.G = (1024 - v) / 1024 }},
	{"dce_tcp_rtt", "µs", func(p *DCQCN, v float64) { p.AlphaPeriod = us(v) }},
	{"initial_alpha_value", "1/1024", func(p *DCQCN, v float64) { p.InitialAlpha = v / 1024 }},
	{"rpg_min_dec_fac", "%", func(p *DCQCN, v float64) { p.MinDecrease = v / 100 }},
	{"rpg_min_rate", "Mbit/s", func(p *DCQCN, v float64) { p.MinRate = v * 1e6 / 8 }},
	{"rate_reduce_monitor_period", "µs", func(p *DCQCN, v float64) { p.RateReducePeriod = us(v) }},
	{"rpg_time_reset", "µs", func(p *DCQCN, v float64) { p.TimeReset = us(v) }},
	{"rpg_byte_reset", "64 B", func(p *DCQCN, v float64) { p.ByteReset = int64(v) * 64 }},
	{"rpg_threshold", "", func(p *DCQCN, v float64) { p.Threshold = int(v) }},
	{"rpg_ai_rate", "Mbit/s", func(p *DCQCN, v float64) { p.AIRate = v * 1e6 / 8 }},
	{"rpg_hai_rate", "Mbit/s", func(p *DCQCN, v float64) { p.HAIRate = v * 1e6 / 8 }},
	{"min_time_between_cnps", "µs", func(p *DCQCN, v float64) { p.CNPInterval = us(v) }},
}

func us(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

// Set changes p's parameters from spec, a comma-separated list of
// name=value with mlx5's parameter names and units (see DefaultDCQCN; for
// the times a Go duration such as 4ms is taken too), e.g.
// "rpg_time_reset=9ms,min_time_between_cnps=4ms". The defaults are tuned
// for a fabric whose round trip is a few microseconds; a slower one
// (software switches, the namespace cluster: milliseconds) needs its
// times scaled up. An unknown name or a bad value is an error naming it.
func (p *DCQCN) Set(spec string) error {
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("DCQCN parameter %q: want name=value", kv)
		}
		i := 0
		for i < len(dcqcnParams) && dcqcnParams[i].name != name {
			i++
		}
		if i == len(dcqcnParams) {
			var names []string
			for _, d := range dcqcnParams {
				names = append(names, d.name)
			}
			return fmt.Errorf("DCQCN parameter %q: unknown (known: %s)", name, strings.Join(names, ", "))
		}
		d := dcqcnParams[i]
		v, err := strconv.ParseFloat(val, 64)
		if err != nil && d.unit == "µs" {
			var t time.Duration
			if t, err = time.ParseDuration(val); err == nil {
				v = float64(t) / float64(time.Microsecond)
			}
		}
		if err != nil || v < 0 || v != v {
			return fmt.Errorf("DCQCN parameter %s=%q: want a number ≥ 0 (%s)", name, val, d.unit)
		}
		if (d.name == "dce_tcp_g" || d.name == "initial_alpha_value") && v > 1024 || d.name == "rpg_min_dec_fac" && v > 100 {
			return fmt.Errorf("DCQCN parameter %s=%s: out of range (%s)", name, val, d.unit)
		}
		d.set(p, v)
	}
	return nil
}
