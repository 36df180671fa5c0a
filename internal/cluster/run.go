package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// CommandError is a failed ip or tc command: the command line as run, its
// error (an exit status, or why it could not start) and its stderr.
type CommandError struct {
	Args   []string // the command line, program first ("tc -n x qdisc add ...")
	Err    error
	Stderr string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Args, " "), e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// runner runs the ip and tc commands of one Up, Down or Stats.
type runner struct {
	ctx context.Context
	ip  string // paths found by exec.LookPath
	tc  string
	nft string // "" where nftables is not installed (needed only for a loss)
	// failAt > 0 makes the failAt-th command (counting from 1) fail
	// without running: the tests' way to stop Up at any step.
	failAt int
	n      int
}

// errInjected is the error of the command failAt names.
var errInjected = errors.New("injected failure")

func newRunner(ctx context.Context) (*runner, error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("%w (install iproute2: apt-get install iproute2): %v", ErrNoIP, err)
	}
	tc, err := exec.LookPath("tc")
	if err != nil {
		return nil, fmt.Errorf("%w (install iproute2: apt-get install iproute2): %v", ErrNoTC, err)
	}
	nft, _ := exec.LookPath("nft")
	return &runner{ctx: ctx, ip: ip, tc: tc, nft: nft}, nil
}

// run runs prog ("ip", "tc" or "nft") with args and returns its stdout;
// the error is a *CommandError. nft runs in a namespace through ip netns
// exec: its first argument is the namespace.
func (r *runner) run(prog string, args ...string) ([]byte, error) {
	path := r.ip
	switch prog {
	case "tc":
		path = r.tc
	case "nft":
		path, prog, args = r.ip, "ip", slices.Concat([]string{"netns", "exec", args[0], r.nft}, args[1:])
	}
	r.n++
	if r.failAt > 0 && r.n == r.failAt {
		return nil, &CommandError{Args: append([]string{prog}, args...), Err: errInjected}
	}
	cmd := exec.CommandContext(r.ctx, path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &CommandError{Args: append([]string{prog}, args...), Err: err, Stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

func (r *runner) ipCmd(args ...string) error {
	_, err := r.run("ip", args...)
	return err
}

func (r *runner) tcCmd(args ...string) error {
	_, err := r.run("tc", args...)
	return err
}

// nftCmd runs nft with args in namespace ns.
func (r *runner) nftCmd(ns string, args ...string) error {
	_, err := r.run("nft", append([]string{ns}, args...)...)
	return err
}

// missingQdisc is tc's stderr when the kernel has no such qdisc (a module
// not built or not loadable).
const missingQdisc = "Specified qdisc kind is unknown"

// qdiscErr gives err, from a tc command adding a qdisc of kind, the
// sentinel of that kind when the kernel lacks it.
func qdiscErr(err error, kind string) error {
	var ce *CommandError
	if !errors.As(err, &ce) || !strings.Contains(ce.Stderr, missingQdisc) {
		return err
	}
	switch kind {
	case "netem":
		return fmt.Errorf("%w: %w", ErrNoNetem, err)
	case "tbf":
		return fmt.Errorf("%w: %w", ErrNoTBF, err)
	}
	return err
}
