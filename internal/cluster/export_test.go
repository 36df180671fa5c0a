package cluster

import "context"

// UpFailAt is Up with its failAt-th ip or tc command failing (from 1;
// 0: none), and the number of commands it ran or tried.
func UpFailAt(ctx context.Context, cfg Config, failAt int) (*Cluster, error) {
	return up(ctx, cfg, failAt)
}

// ErrInjected is the error of the command UpFailAt fails.
var ErrInjected = errInjected

// SetGeteuid replaces os.Geteuid until the returned function is called.
func SetGeteuid(f func() int) (restore func()) {
	old := geteuid
	geteuid = f
	return func() { geteuid = old }
}

// Owns, TBF and NetemLimit expose owns, tbf and netemLimit.
func Owns(name, ns string) bool      { return owns(name, ns) }
func (c *Cluster) TBF() []string     { return c.tbf(false) }
func (c *Cluster) PortTBF() []string { return c.tbf(true) }
func (c *Cluster) NetemLimit() int   { return c.netemLimit() }
func Plan(cfg Config) *Cluster       { return plan(cfg) }

// RPSMask is rpsMask.
func RPSMask(first, n int) string { return rpsMask(first, n) }
