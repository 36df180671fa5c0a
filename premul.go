package goccl

import (
	"fmt"

	"github.com/goccl/goccl/internal/reduce"
)

// PreMulSum (NCCL's ncclRedOpCreatePreMulSum): a reduction that multiplies
// every rank's input by a scalar before summing, as FSDP does to average
// float16 gradients without overflowing their sum. CreatePreMulSum returns
// an operator valid on this communicator only, for AllReduce, Reduce and
// ReduceScatter (and their I forms and coalesced forms) on floating-point
// types; each rank may pass its own scalar. The input is scaled into the
// output buffer (AllReduce, and Reduce on its root) or a scratch buffer the
// communicator keeps (ReduceScatter, Reduce off the root), never in the
// caller's send buffer; the sum then runs as Sum.

// preMulBase is the first operator number CreatePreMulSum hands out.
const preMulBase = 64

// CreatePreMulSum returns a new operator: Sum of the inputs each multiplied
// by scalar on this rank. Every rank must create its operators in the same
// order (so that they share numbers). Destroy it with DestroyRedOp.
func (c *Comm) CreatePreMulSum(scalar float64) (RedOp, error) {
	if c == nil {
		return 0, nilComm("CreatePreMulSum")
	}
	c.premulMu.Lock()
	defer c.premulMu.Unlock()
	for i, in := range c.premul {
		if !in.used {
			c.premul[i] = preMulOp{scalar, true}
			return RedOp(preMulBase + i), nil
		}
	}
	if preMulBase+len(c.premul) > 255 {
		return 0, &Error{Rank: c.rank, Op: "CreatePreMulSum", Err: fmt.Errorf("%w: %d operators exist, the most a communicator holds", ErrInvalidArgument, len(c.premul))}
	}
	c.premul = append(c.premul, preMulOp{scalar, true})
	return RedOp(preMulBase + len(c.premul) - 1), nil
}

// DestroyRedOp releases an operator CreatePreMulSum returned. Operations
// already issued with it are not affected.
func (c *Comm) DestroyRedOp(op RedOp) error {
	if c == nil {
		return nilComm("DestroyRedOp")
	}
	c.premulMu.Lock()
	defer c.premulMu.Unlock()
	i := int(op) - preMulBase
	if i < 0 || i >= len(c.premul) || !c.premul[i].used {
		return &Error{Rank: c.rank, Op: "DestroyRedOp", Err: fmt.Errorf("%w: reduction op %d was not created on this communicator", ErrInvalidArgument, uint8(op))}
	}
	c.premul[i].used = false
	return nil
}

// preMulOp is one created operator.
type preMulOp struct {
	scalar float64
	used   bool
}

// resolvePreMul turns a call's created operator into Sum with its scalar
// (a.premul), or reports that op is not one of this communicator's.
func (c *Comm) resolvePreMul(a *call) error {
	if a.op < preMulBase {
		return nil
	}
	c.premulMu.Lock()
	i := int(a.op) - preMulBase
	ok := i < len(c.premul) && c.premul[i].used
	var s float64
	if ok {
		s = c.premul[i].scalar
	}
	c.premulMu.Unlock()
	k := a.errKind()
	switch {
	case !ok:
		return c.errorf(k, 0, "%w: unknown reduction op %d (not created on this communicator)", ErrInvalidArgument, uint8(a.op))
	case !a.dt.IsFloat():
		return c.errorf(k, 0, "%w: premulsum is only defined for floating-point types, got %v", ErrInvalidArgument, a.dt)
	}
	a.op, a.premul, a.hasPremul = Sum, s, true
	return nil
}

// preMultiply scales a PreMulSum call's input (c.mu held, the operation
// begun): into the output when it holds the whole input, else into the
// scratch buffer; the call then sums from there.
func (c *Comm) preMultiply(a *call) error {
	dst := a.recv
	if a.kind == opReduceScatter || a.kind == opReduce && c.rank != a.root {
		if cap(c.scratch) < len(a.send) {
			c.scratch = make([]byte, len(a.send))
		}
		dst = c.scratch[:len(a.send)]
	}
	if err := reduce.ScaleInto(reduce.DType(a.dt), dst, a.send, a.premul); err != nil {
		return c.errorf(a.kind, 0, "%w: %v", ErrInvalidArgument, err)
	}
	a.send = dst
	return nil
}
