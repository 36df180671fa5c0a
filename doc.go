// Package goccl is a communication library for distributed training and HPC
// in pure Go: a communicator (Comm) of ranks, one per process or goroutine,
// running the collectives of NCCL and MPI over shared memory between ranks
// on one host and TCP between hosts.
//
// A job starts its ranks with a launcher (goccl run, torchrun, mpirun, srun)
// and each rank calls Init, which finds its rank, the world size and the
// rendezvous store in the launcher's environment, connects to every other
// rank and returns the Comm:
//
//	c, err := goccl.Init(ctx)
//	if err != nil { ... }
//	defer c.Close()
//	err = goccl.AllReduce(ctx, c, grad, grad, len(grad), goccl.Avg)
//
// Ranks may also be goroutines of one process: Init with WithRank,
// WithWorldSize and a shared WithStore (rendezvous.NewMemStore), as the
// examples below do.
//
// Collectives: AllReduce, Broadcast, Reduce, AllGather, ReduceScatter,
// AllToAll, AllToAllv, Gather, Scatter and Barrier; point to point: Send,
// Recv and SendRecv. Each is generic over the element types (Element:
// int8, uint8, int32, uint32, int64, uint64, Float16, BFloat16, float32,
// float64) and has a *Bytes twin on Comm that takes a DataType at run time.
// Counts are in elements, never bytes. Every rank must call the same
// collectives in the same order with the same count, type, reduction and
// root; a disagreement is an error (ErrMismatch) on the ranks that see it,
// not a hang.
//
// Every operation has a non-blocking form (IAllReduce, ISend, ...) that
// returns a Request to Wait for or Test; operations of a communicator run
// one at a time in issue order. Groups (Comm.Group, Comm.IGroup) run
// point-to-point operations together, so exchanges in which every rank sends
// first do not deadlock.
//
// Errors are *Error values naming the rank, the operation and its sequence
// number; they wrap ErrInvalidArgument, ErrMismatch, ErrClosed, ErrPeerLost,
// ErrAborted, ErrCorrupt or the context's error. Every blocking call takes a
// context.Context; without a deadline the communicator's operation timeout
// applies (GOCCL_TIMEOUT, WithTimeout).
//
// The environment variables (GOCCL_*) are listed by `goccl env` and in the
// README; the design in docs/design.md.
package goccl
