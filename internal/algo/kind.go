package algo

// Kind is an operation kind, numbered as the Op field of the transport
// headers carries it (the communicator's kinds are these, named there).
type Kind uint8

const (
	KindAllReduce Kind = iota + 1
	KindBroadcast
	KindReduce
	KindAllGather
	KindReduceScatter
	KindAllToAll
	KindSendRecv
	KindBarrier
	KindCheck // GOCCL_DEBUG_CHECK's fingerprint exchange
	KindAllToAllv
	KindGather
	KindScatter
	KindGroup // a group of operations; never in a header
	NumKinds
)
