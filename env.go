package goccl

import (
	"fmt"
	"strings"

	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/rendezvous"
)

// fromEnv reads the GOCCL_* variables that Init uses, in one place, through
// their declarations in internal/config: into c's settings (timeout, forced
// algorithm, direct-schedule threshold, debug check) and, for a
// world of more than one rank, into the bootstrap parameters p (the
// interface, job token, host identity, checksums, TLS, and the transports,
// each of which reads its own variables: bootstrap.FromEnv).
// Options in cfg win over the environment. Every set GOCCL_* value is
// checked first, so a bad one fails Init at once naming the variable
// (ErrInvalidArgument). (GOCCL_DEBUG, GOCCL_DEBUG_SUBSYS and
// GOCCL_DEBUG_FILE are read by the logger, log.go; the launchers' variables
// by rendezvous.FromEnv.)
func (c *Comm) fromEnv(cfg *options, p *bootstrap.Params) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}()
	if err := config.CheckEnv(); err != nil {
		return err
	}
	c.timeout = DefaultTimeout
	if err := apply(&c.timeout, config.Timeout.Duration); err != nil {
		return err
	}
	if cfg.timeout > 0 {
		c.timeout = cfg.timeout
	}
	c.timeoutFrom = timeoutSource(cfg, c.timeout)
	if err := c.selectorFromEnv(); err != nil {
		return err
	}
	if c.debugCheck, err = config.DebugCheck.Bool(); err != nil {
		return err
	}
	c.progressNice = defaultProgressNice
	if err := apply(&c.progressNice, config.ProgressNice.Int); err != nil {
		return err
	}
	if err := c.traceFromEnv(cfg); err != nil {
		return err
	}
	if !cfg.split {
		c.topoDump = config.TopoDumpFile.Get()
	}
	if c.size == 1 {
		return nil // no links
	}
	p.Iface = config.SocketIfname.Get()
	if p.Token = cfg.token; p.Token == "" {
		p.Token = config.JobToken.Get()
	}
	if p.Token == "" && p.Store == nil {
		// Ranks that meet through the address file share a token through
		// the store directory (the store uses it too: rendezvous.Connect).
		e := p.Env
		e.Rank, e.WorldSize = c.rank, c.size
		if p.Token, err = rendezvous.DirToken(e); err != nil {
			return err
		}
	}
	if p.HostID = config.HostID.Get(); strings.ContainsAny(p.HostID, "|\n") {
		return fmt.Errorf("%s=%q: a host identity may not contain '|' or a newline", config.HostID.Name, p.HostID)
	}
	if p.Transports, err = bootstrap.FromEnv(); err != nil {
		return err
	}
	env, err := config.Checksum.Bool()
	if err != nil {
		return err
	}
	p.Checksum = cfg.checksum || env
	return tlsFromEnv(cfg, p)
}

// apply sets *dst to a variable's value (or its default) when it has one.
func apply[T any](dst *T, get func() (T, bool, error)) error {
	v, ok, err := get()
	if ok {
		*dst = v
	}
	return err
}

// tlsFromEnv settles the TCP links' TLS: WithTLS's configurations, else
// GOCCL_TLS=1 with the certificate files GOCCL_TLS_CERT, GOCCL_TLS_KEY and
// GOCCL_TLS_CA, else with keys made from the job token.
func tlsFromEnv(cfg *options, p *bootstrap.Params) error {
	p.TLSServer, p.TLSClient = cfg.tlsServer, cfg.tlsClient
	if p.TLSServer != nil || p.TLSClient != nil {
		if p.TLSServer == nil || p.TLSClient == nil {
			return fmt.Errorf("WithTLS needs both a server and a client configuration")
		}
		return nil
	}
	on, err := config.TLS.Bool()
	if err != nil || !on {
		return err
	}
	p.MakeTLS = true
	p.CertFile, p.KeyFile, p.CAFile = config.TLSCert.Get(), config.TLSKey.Get(), config.TLSCA.Get()
	switch {
	case p.CertFile != "" || p.KeyFile != "" || p.CAFile != "":
		if p.CertFile == "" || p.KeyFile == "" || p.CAFile == "" {
			return fmt.Errorf("%s, %s and %s go together (have %q, %q, %q)",
				config.TLSCert.Name, config.TLSKey.Name, config.TLSCA.Name, p.CertFile, p.KeyFile, p.CAFile)
		}
	case p.Token == "":
		return fmt.Errorf("%s=1 needs the job token (%s, set by goccl run) or certificate files (%s, %s, %s)",
			config.TLS.Name, config.JobToken.Name, config.TLSCert.Name, config.TLSKey.Name, config.TLSCA.Name)
	}
	return nil
}

// traceFromEnv sets up the operation recorder and the flight recorder from
// GOCCL_TRACE_FILE, GOCCL_FLIGHT_RECORDER and GOCCL_FLIGHT_RECORDER_DUMP
// (none when all are unset: then nothing is timed).
func (c *Comm) traceFromEnv(cfg *options) error {
	keep := 0
	if err := apply(&keep, config.FlightRecorder.Int); err != nil {
		return err
	}
	path := config.TraceFile.Get()
	if path == "" && keep == 0 && config.FlightRecorderDump.Get() == "" {
		return nil
	}
	if keep == 0 {
		keep = defaultFlightRecorder
	}
	c.flightFromEnv(keep, cfg.split, cfg.jobID)
	if path != "" {
		path = trace.ExpandPath(path, c.rank)
	}
	rec, err := trace.New(c.rank, keep, path)
	if err != nil {
		return fmt.Errorf("%s: %w", config.TraceFile.Name, err)
	}
	c.rec = rec
	return nil
}
