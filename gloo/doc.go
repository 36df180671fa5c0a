// Package gloo makes a Go process a rank of a PyTorch torch.distributed
// process group of the Gloo backend, so that Python trainers and Go
// services (data loaders, environment servers, parameter sync, checkpoint
// writers) run collectives together in one job:
//
//	g, err := gloo.JoinEnv(ctx)            // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//	err = gloo.AllReduce(ctx, g, grads, goccl.Sum)   // all_reduce(tensor)
//	err = gloo.Broadcast(ctx, g, params, 0)          // broadcast(tensor, src=0)
//	err = gloo.AllGather(ctx, g, all, mine)          // all_gather(list, tensor)
//	err = gloo.Send(ctx, g, batch, 1, 0)             // recv(tensor, src=<this rank>) on rank 1
//	err = gloo.Barrier(ctx, g)                       // barrier()
//
// A []T of Go elements stands for a contiguous CPU tensor of the same
// dtype: float32 for torch.float32, float64 for torch.float64, int64 for
// torch.int64, int32, int8, uint8, goccl.Float16 for torch.float16 and
// goccl.BFloat16 for torch.bfloat16. Lengths are in elements; the ranks
// must agree on them as they must in torch (a size that disagrees is an
// error naming both sizes, not a hang).
//
// # What it speaks
//
// The Gloo side is Gloo as Debian's python3-torch 1.13 links it (gloo
// commit 5b14351, 2022-05-18) and torch 1.13's ProcessGroupGloo:
//
//   - rendezvous: Gloo's rendezvous::Context::connectFullMesh over the
//     job's c10d store: "rank_<r>" (host name) and "<r>" (one 136-byte
//     tcp::Address, a sockaddr_storage and a sequence number, per peer)
//     under "<group>/0/", then torch's store-based barrier and sequence
//     number key;
//   - transport: Gloo's tcp::Pair, one TCP connection per pair of ranks,
//     the side with the larger address connecting; every message a
//     48-byte preamble (nbytes, opcode, slot, offset, length, roffset),
//     unbound-buffer sends and receives matched per slot with the
//     NOTIFY_SEND_READY / NOTIFY_RECV_READY handshake before the data;
//   - algorithms: exactly Gloo's, because every rank must exchange the
//     same messages on the same slots: the ring all_reduce of allreduce.cc
//     (reduce-scatter then all-gather over segments of at most 1 MiB, at
//     least two per rank, two in flight), the binomial-tree broadcast of
//     broadcast.cc, the ring all_gather of allgather.cc (each block in two
//     halves) and the dissemination barrier of barrier.cc; slots are
//     Gloo's Slot::build(prefix, tag) with torch's per-collective tag;
//     send/recv use the user's tag as the slot.
//
// All ranks, Go and Python, add in the same order, so their results are
// the same bits. Reductions are goccl's kernels (internal/reduce).
//
// # Limits
//
// One Gloo device per group (GLOO_SOCKET_IFNAME naming one interface);
// the default group of init_process_group (WithGroupName and
// WithBarrierKey reach others made the same way); CPU tensors; operations
// run one at a time on the Go side, in the order called (torch may run two
// at once; they match by slot either way). Not provided: reduce, gather,
// scatter, all_to_all, recv from any source, and torch 2.x's newer Gloo
// (which sends a sequence number handshake when pairs connect).
//
// # Failures
//
// Every call takes a context. A peer that dies or closes its group fails
// the operation with a *PeerLostError naming it (errors.Is ErrPeerLost),
// wrapped in an *OpError naming this rank, the operation and its tag; a
// message that disagrees with what this rank posted is a *ProtocolError.
// Gloo relays no cause: a rank that fails closes its connections, which is
// how ranks that did not talk to the lost one learn of it, so the peer an
// error names is the nearest connection lost, not always the rank that died.
// After any failure, a cancelled context included, the group is closed:
// Gloo has no way to drop messages already in flight. No buffer is read or
// written after its call has returned.
package gloo
