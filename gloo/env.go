package gloo

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// JoinEnv joins the default process group of a job whose Python ranks call
// init_process_group("gloo") with init_method "env://" (the default), from
// the same variables: MASTER_ADDR and MASTER_PORT for the store (never
// goccl's own GOCCL_STORE_ADDR, which the Python ranks do not know), RANK
// and WORLD_SIZE (or the other launchers' rank variables that
// rendezvous.FromEnv reads). The store is found as torch 1.13's env://
// finds it:
//
//   - under torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True, also set
//     by goccl run) every rank is a client of the c10d TCPStore at
//     MASTER_ADDR:MASTER_PORT, under the prefix
//     "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>";
//   - otherwise rank 0 serves the TCPStore on MASTER_PORT (on every
//     address, as torch's TCPStore does) and the others connect to it.
//
// Keys then live under "default_pg/", as init_process_group puts them.
// Close closes the store (and the server of rank 0) with the group.
func JoinEnv(ctx context.Context, opts ...Option) (*Group, error) {
	env, ok, err := rendezvous.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("gloo: join: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("gloo: join: RANK and WORLD_SIZE are not set (nor %s, OMPI_COMM_WORLD_RANK, SLURM_PROCID): %w", config.Rank.Name, ErrInvalidArgument)
	}
	// torch's variables, not goccl's own store (GOCCL_STORE_ADDR, which
	// goccl run also sets): the Python ranks know only these.
	host, port := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("gloo: join: rank %d: MASTER_ADDR and MASTER_PORT are not set: %w", env.Rank, ErrInvalidArgument)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("gloo: join: rank %d: MASTER_PORT=%q is not a port number in [1, 65535]: %w", env.Rank, port, ErrInvalidArgument)
	}
	storeAddr := net.JoinHostPort(host, port)
	agent := strings.EqualFold(os.Getenv("TORCHELASTIC_USE_AGENT_STORE"), "true") || os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "1" // as rendezvous.FromEnv reads it
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	// torch's TCPStore client keeps every key of its users under "/";
	// PrefixStore(p, store) puts p + "/" in front.
	addr, prefix := storeAddr, "/"
	if agent {
		attempt := os.Getenv("TORCHELASTIC_RESTART_COUNT")
		if attempt == "" {
			attempt = "0"
		}
		prefix = "//worker/attempt_" + attempt + "/"
	} else if env.Rank == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort("", port))
		if err != nil {
			return nil, fmt.Errorf("gloo: join: rank 0 serves the TCPStore on port %s (MASTER_PORT): %w", port, err)
		}
		srv := rendezvous.ServeC10d(ln)
		closers = append(closers, srv.Close)
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	raw, err := rendezvous.DialC10d(ctx, addr, "")
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("gloo: join: rank %d: store at %s: %w", env.Rank, addr, err)
	}
	closers = append(closers, raw.Close)
	if !agent {
		// A TCPStore made by env:// waits, on rank 0, for world size
		// clients to have added one to "init/" (TCPStore::waitForWorkers).
		if _, err := raw.Add(ctx, "init/", 1); err != nil {
			closeAll()
			return nil, fmt.Errorf("gloo: join: rank %d: store at %s: %w", env.Rank, addr, err)
		}
	}
	st := rendezvous.PrefixStore(raw, prefix)
	g, err := Join(ctx, rendezvous.PrefixStore(st, "default_pg/"), env.Rank, env.WorldSize, opts...)
	if err != nil {
		closeAll()
		return nil, err
	}
	g.closers = closers
	return g, nil
}
