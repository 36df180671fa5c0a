package cluster

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a link rate in bits per second; 0 means unshaped.
type Rate uint64

// rateUnits are tc's rate units (tc(8), RATES), longest first so that
// "kbit" is not read as "bit" after a number ending in k.
var rateUnits = []struct {
	suffix string
	bits   float64 // bits per second of one unit
}{
	{"tibit", 1 << 40}, {"gibit", 1 << 30}, {"mibit", 1 << 20}, {"kibit", 1 << 10},
	{"tibps", 8 * (1 << 40)}, {"gibps", 8 * (1 << 30)}, {"mibps", 8 * (1 << 20)}, {"kibps", 8 * (1 << 10)},
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3},
	{"tbps", 8e12}, {"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3},
	{"bit", 1}, {"bps", 8},
}

// ParseRate reads a rate as tc writes it (tc(8), RATES): a number with a
// unit, bit, kbit, mbit, gbit, tbit (powers of 1000), kibit... (powers of
// 1024), or bps, kbps, mbps, gbps, tbps, kibps... for bytes per second;
// a bare number is bits per second. Units are case-insensitive. "0" (or
// "") is no shaping.
func ParseRate(s string) (Rate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, nil
	}
	mult := 1.0
	for _, u := range rateUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = num, u.bits
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid rate %q: want a number and a tc unit (100mbit, 1gbit, 10gbit, 125mbps)", s)
	}
	bits := v * mult
	if bits > 0 && bits < 8 {
		return 0, fmt.Errorf("invalid rate %q: below 8 bit/s", s)
	}
	if bits >= 1<<63 {
		return 0, fmt.Errorf("invalid rate %q: too large", s)
	}
	return Rate(math.Round(bits)), nil
}

// String writes r as tc reads it, in the largest power-of-1000 bit unit
// that keeps it whole: "100mbit", "1gbit", "1500kbit"; "0" for no shaping.
func (r Rate) String() string {
	if r == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		div    Rate
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if r%u.div == 0 {
			return strconv.FormatUint(uint64(r/u.div), 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "bit"
}

// Set and Type make *Rate a flag value (pflag.Value, flag.Value).
func (r *Rate) Set(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Type is the flag value's type name.
func (r *Rate) Type() string { return "rate" }

// MarshalText and UnmarshalText keep the tc form in the state file.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *Rate) UnmarshalText(b []byte) error { return r.Set(string(b)) }
