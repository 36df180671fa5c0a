package goccl

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/algo"
)

// envDuration parses GOCCL_TIMEOUT-style values: a Go duration ("90s", "5m")
// or a number of seconds.
func envDuration(name string) (time.Duration, bool, error) {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(secs * float64(time.Second)), true, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, false, fmt.Errorf("goccl: %s=%q is neither a duration (90s, 5m) nor a number of seconds", name, v)
	}
	return d, true, nil
}

// algoFromEnv reads GOCCL_ALGO, the AllReduce algorithm to force (like
// NCCL_ALGO): ring, rhd, rd, tree or direct; unset means the tuner decides.
func algoFromEnv() (algo.Algorithm, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv("GOCCL_ALGO"))); v {
	case "":
		return algo.Auto, nil
	case "ring":
		return algo.Ring, nil
	case "rhd":
		return algo.RHD, nil
	case "tree":
		return algo.Tree, nil
	case "rd":
		return algo.RD, nil
	case "direct":
		return algo.Direct, nil
	default:
		return 0, fmt.Errorf("%w: GOCCL_ALGO=%q: want ring, rhd, rd, tree or direct", ErrInvalidArgument, v)
	}
}
