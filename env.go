package goccl

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/bootstrap"
)

// fromEnv reads the GOCCL_* variables that Init uses, in one place: into
// c's settings (GOCCL_TIMEOUT, GOCCL_ALGO, GOCCL_DIRECT_MIN_BYTES,
// GOCCL_DEBUG_CHECK) and, for a world of more than one rank, into the
// bootstrap parameters p (the interface, job token, shared memory, sockets
// per peer, checksums and TLS). Options in cfg win over the environment.
// (GOCCL_DEBUG is read by the logger, the launchers' variables by
// rendezvous.FromEnv.)
func (c *Comm) fromEnv(cfg *config, p *bootstrap.Params) error {
	c.timeout = DefaultTimeout
	if d, ok, err := envDuration("GOCCL_TIMEOUT"); err != nil {
		return err
	} else if ok {
		c.timeout = d
	}
	if cfg.timeout > 0 {
		c.timeout = cfg.timeout
	}
	var err error
	if c.algoForced, err = algoFromEnv(); err != nil {
		return err
	}
	c.directMin = directMinBytes
	if v := os.Getenv("GOCCL_DIRECT_MIN_BYTES"); v != "" {
		if c.directMin, err = strconv.Atoi(v); err != nil || c.directMin < 0 {
			return fmt.Errorf("%w: GOCCL_DIRECT_MIN_BYTES=%q must be a byte count >= 0", ErrInvalidArgument, v)
		}
	}
	c.debugCheck = os.Getenv("GOCCL_DEBUG_CHECK") == "1"
	if c.size == 1 {
		return nil // no links
	}
	p.Iface = os.Getenv("GOCCL_SOCKET_IFNAME")
	if p.Token = cfg.token; p.Token == "" {
		p.Token = os.Getenv("GOCCL_JOB_TOKEN")
	}
	p.ShmDir = os.Getenv("GOCCL_SHM_DIR")
	p.ShmDisable = os.Getenv("GOCCL_SHM_DISABLE") == "1"
	p.NSocks = defaultNSocks
	if v := os.Getenv("GOCCL_NSOCKS_PERPEER"); v != "" {
		if p.NSocks, err = strconv.Atoi(v); err != nil || p.NSocks < 1 || p.NSocks > 64 {
			return fmt.Errorf("%w: GOCCL_NSOCKS_PERPEER=%q must be an integer in [1, 64]", ErrInvalidArgument, v)
		}
	}
	p.Checksum = cfg.checksum
	switch v := os.Getenv("GOCCL_CHECKSUM"); v {
	case "", "0":
	case "1":
		p.Checksum = true
	default:
		return fmt.Errorf("%w: GOCCL_CHECKSUM=%q: want 0 or 1", ErrInvalidArgument, v)
	}
	p.TLSServer, p.TLSClient = cfg.tlsServer, cfg.tlsClient
	switch v := os.Getenv("GOCCL_TLS"); {
	case p.TLSServer != nil || p.TLSClient != nil:
		if p.TLSServer == nil || p.TLSClient == nil {
			return fmt.Errorf("%w: WithTLS needs both a server and a client configuration", ErrInvalidArgument)
		}
	case v == "" || v == "0":
	case v == "1":
		p.MakeTLS = true
		p.CertFile, p.KeyFile, p.CAFile = os.Getenv("GOCCL_TLS_CERT"), os.Getenv("GOCCL_TLS_KEY"), os.Getenv("GOCCL_TLS_CA")
		switch {
		case p.CertFile != "" || p.KeyFile != "" || p.CAFile != "":
			if p.CertFile == "" || p.KeyFile == "" || p.CAFile == "" {
				return fmt.Errorf("%w: GOCCL_TLS_CERT, GOCCL_TLS_KEY and GOCCL_TLS_CA go together (have %q, %q, %q)", ErrInvalidArgument, p.CertFile, p.KeyFile, p.CAFile)
			}
		case p.Token == "":
			return fmt.Errorf("%w: GOCCL_TLS=1 needs the job token (GOCCL_JOB_TOKEN, set by goccl run) or certificate files (GOCCL_TLS_CERT, GOCCL_TLS_KEY, GOCCL_TLS_CA)", ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("%w: GOCCL_TLS=%q: want 0 or 1", ErrInvalidArgument, v)
	}
	return nil
}

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
