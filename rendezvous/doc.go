// Package rendezvous provides the key-value stores ranks use to find each other
// at Init: an embedded TCP store served by rank 0 (the default), a file store in
// a shared directory, a client of PyTorch's c10d TCPStore (the store
// torchrun's agent serves), a client of an etcd cluster, and an in-process
// store for tests.
//
// # Finding the store
//
// FromEnv reads rank, world size and local rank from the environment of the
// launcher (goccl's own GOCCL_* variables, torchrun, OpenMPI's mpirun or
// Slurm's srun), together with the store address when the launcher gives one.
// Connect turns that into a Store: rank 0 serves a TCPServer and every rank,
// rank 0 included, talks to it through a TCPStore.
//
// # Rendezvous under torchrun
//
// torchrun's agent serves a PyTorch c10d TCPStore on MASTER_ADDR:MASTER_PORT
// for the job and tells its workers so with TORCHELASTIC_USE_AGENT_STORE=True
// (the default "static" rendezvous, in torch 1.13 as in 2.x). Rank 0 cannot
// serve goccl's store on that port then, so every rank, rank 0 included,
// uses the agent's store through C10dStore, a client of c10d's TCPStore wire
// protocol, under the key prefix goccl/torchrun/<TORCHELASTIC_RESTART_COUNT>/<generation>/,
// apart from torch's keys (which start with "/") and from earlier attempts
// and earlier Inits (the agent's store outlives them). The client finds
// which protocol the server speaks (PyTorch 1.x, or 2.x with its VALIDATE
// greeting) at its first connection. GOCCL_STORE_ADDR, when set, still
// makes rank 0 serve goccl's own store at that address. A Python rank's
// TCPStore can be reached the same way with DialC10d.
//
// # Rendezvous under mpirun
//
// mpirun (like srun) tells each process its rank and the world size but gives
// no address where rank 0 can be reached, so when GOCCL_STORE_ADDR (or
// MASTER_ADDR and MASTER_PORT) is not set, goccl passes rank 0's address
// through the file system. Rank 0 starts the TCP store on an ephemeral port of
// one of its routable addresses, then writes "host:port" and a random nonce
// to the address file <dir>/goccl-store-<job id>.addr, atomically (a
// temporary file renamed into place), where <dir> is GOCCL_STORE_DIR, or the
// system temporary directory when that is unset, and <job id> is an
// identifier every rank of the job sees alike: GOCCL_JOB_ID, else the one the
// launcher provides (OpenMPI's OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE,
// Slurm's SLURM_JOB_ID.SLURM_STEP_ID, torchrun's TORCHELASTIC_RUN_ID). The
// other ranks poll for the file until the Init timeout, dial the address
// they find, and accept it only if that server holds the same nonce, so a
// stale file left by an earlier job with the same id (which rank 0 also
// deletes before it starts serving) is never used: they keep polling instead.
// Rank 0 deletes the file when its store closes. The temporary directory
// works when all ranks run on one host; for jobs spanning hosts, set
// GOCCL_STORE_DIR to a directory on a file system shared by all hosts (NFS,
// Lustre, a home directory), or set GOCCL_STORE_ADDR=host:port on every rank
// to name rank 0's host and a free port, which needs no shared file system.
// Without a job id and without a store address, Connect fails and asks for
// GOCCL_STORE_ADDR or GOCCL_JOB_ID.
//
// mpirun and srun give no job token (GOCCL_JOB_TOKEN) either, so ranks that
// meet through the address file also share one through it: the first rank
// to get there writes a random token to <dir>/goccl-store-<job id>.token,
// readable by its owner only (mode 0600), and the others read it
// (DirToken); a token file that allows more than 0600, is not a regular
// file or belongs to another user is refused. The store and every TCP link
// of the job then prove that token. Rank 0 deletes the file when its store
// closes.
//
// # Rendezvous through etcd
//
// GOCCL_STORE=etcd://host:2379[,host:2379...]/prefix (FromEnv sets
// Env.Etcd) makes every rank, rank 0 included, a client of that etcd
// cluster: nobody serves, so no rank has to be up
// before the others can reach the store, and the store survives the loss of
// any rank. Connect keeps the job's keys under
// <prefix>/<job id>/<attempt>/<generation>/ (etcd.JobPrefix: the job id as
// for the address file, "default" without one; torchrun's restart count;
// the count of this process's Inits), all on one etcd lease that every open
// rank keeps alive. The last of the world's ranks to close revokes it,
// deleting the keys; the keys of a job whose ranks died vanish the lease's
// TTL (60 s) after the last one stopped. Every rank counts itself in when
// it connects: a rank that finds the world already complete under its
// prefix (an earlier run with the same job id that crashed less than a TTL
// ago, or a job still running) fails, naming the prefix, instead of reading
// that run's keys. GOCCL_STORE=tcp://host:port and file:///dir are
// spellings of GOCCL_STORE_ADDR and GOCCL_STORE_DIR.
//
// The etcd store lives in package rendezvous/etcd, which registers the
// etcd:// scheme (RegisterScheme) when a program imports it:
//
//	import _ "github.com/goccl/goccl/rendezvous/etcd"
//
// so that programs that never use etcd do not link its client and gRPC.
// Without that import, Connect and Open fail on an etcd:// URL and name
// the import to add.
//
// # The TCP store
//
// The TCP store's wire protocol is described in wire.go: length-prefixed
// binary frames with bounded keys (MaxKeyLen) and values (MaxValueLen). The
// server holds a Get or Wait until its keys exist, so clients never poll; a
// malformed frame closes only that client's connection.
package rendezvous
