// Package xfer is goccl's transfer agent: point-to-point block transfers
// between named agents and memory tiers, the job NVIDIA's NIXL and
// Mooncake's Transfer Engine do for disaggregated inference (a prefill
// worker's KV cache pulled by a decode worker, cold blocks spilled to a file
// and brought back).
//
// The model is NIXL's (nixlAgent, nixl_xfer_dlist_t, nixlXferReqH):
//
//   - An Agent has a name, unique in the job, and serves its registered
//     memory to other agents.
//   - Memory is registered per type: DRAM (a Go slice; or memory from
//     Agent.Alloc or Agent.MapFile, shared mappings of a memfd or of a
//     file that agents on the same host map and copy into directly) and FILE (a range of a file; POSIX pread/pwrite,
//     O_DIRECT when asked). A Desc names bytes as NIXL's descriptors do:
//     DRAM by virtual address and length (device id 0), FILE by file
//     offset and length with the file's descriptor number as device id.
//   - An agent's metadata (its addresses and registered regions) is a blob
//     (LocalMetadata) another agent loads (LoadRemoteMetadata), or that goes
//     through a rendezvous store: goccl's TCP store or etcd (SendLocalMD,
//     FetchRemoteMD; a peer unknown at first use is fetched then).
//   - A transfer request is READ (remote into local) or WRITE (local into
//     remote) of a list of local descriptors paired one-to-one with remote
//     ones, with an optional notification delivered to the remote agent
//     once every byte has landed (GetNotifs there). PostXferReq never
//     blocks; XferStatus / Wait report pending, done or the error.
//
// Backends, chosen per peer and memory: the agent itself (memcpy, and
// pread/pwrite for FILE), shared memory on the same host (the peer's Alloc
// regions mapped, plain copies), and TCP between hosts (descriptors split
// into chunks striped over Options.Streams connections per peer, each
// chunk acknowledged by the target once it is in its memory; with
// Options.Checksum each chunk carries a CRC-32C the receiver verifies). A
// FILE region of a remote agent is served over TCP by that agent.
//
// A request completes only when every byte landed: a WRITE chunk counts once
// the target acknowledged it, a READ chunk once all its bytes arrived. A peer
// that dies or whose metadata is invalidated fails the requests it was part
// of with an *Error naming the agent and the request; TCP connections carry
// keep-alives and a user timeout (Options.PeerTimeout) so a silent peer is
// noticed too.
package xfer
