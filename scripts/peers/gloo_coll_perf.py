"""gloo_coll_perf: the PyTorch Gloo peer of `goccl perf`.

Times one torch.distributed collective per size over the gloo backend
(float32 CPU tensors, sum where it reduces) and prints on rank 0 the columns
of nccl-tests:
  size(B) count type redop root time(us) algbw(GB/s) busbw(GB/s) #wrong
time is the slowest rank's mean over -n blocking operations (a quarter of
them, at least 3, from 8 MiB) after -w warm-up ones. all_reduce and
broadcast work in place (torch's API), all_gather and alltoall out of place.
size and count follow nccl-tests: size is the whole buffer (the gathered
output of all_gather, each rank's buffer of alltoall) and count the elements
per call; those split the buffer into per-rank blocks of count elements,
rounded down to 16 bytes (sizes with an empty block are left out), so rows
line up with `goccl perf`. algbw = size / time, GB = 1e9,
busbw = algbw * the factor of nccl-tests doc/PERFORMANCE.md for n ranks:
all_reduce 2(n-1)/n, all_gather, reduce_scatter and alltoall (n-1)/n,
broadcast 1. After timing, one operation on known data is checked on every
rank; #wrong is the number of wrong elements summed over ranks.

For all_reduce every rank issues exactly the operations that
gloo/internal/glooperf issues (same order, types and data), so a Go rank can
take the place of any rank. torch 1.13's Gloo has no reduce_scatter: asking
for it fails with a message.

Run 2 ranks (torch's env:// contract; Debian python3-torch):
  for r in 0 1; do MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 RANK=$r WORLD_SIZE=2 \\
    /usr/bin/python3 scripts/peers/gloo_coll_perf.py [-c all_reduce] [-b 8] [-e 128M] [-f 4] [-n 20] [-w 5] & done; wait
"""
import argparse
import datetime
import sys
import time

import torch
import torch.distributed as dist

BUSFACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "alltoall": lambda n: (n - 1) / n,
}


def size(s):
    """8, 64K, 128M, 1G (powers of 1024) -> bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    try:
        v = int(s[:-1] if mult > 1 else s) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a size")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s!r}: need at least 1")
    return v


def value(rank, k):
    """Check data, distinct per rank and element (a tensor when k is one)."""
    return (rank + 1) * 64 + k % 61


class Bench:
    """The buffers and operation of one collective at one size."""

    def __init__(self, coll, count, rank, n):
        self.coll, self.rank, self.n = coll, rank, n
        self.count = count
        self.chunk = count // n if coll in ("all_gather", "alltoall", "reduce_scatter") else count
        self.src = torch.zeros(self.chunk if coll == "all_gather" else count)
        self.out = None if coll in ("all_reduce", "broadcast") else torch.zeros(count)  # those two work in place
        self.outs = list(self.out.split(self.chunk)) if coll == "all_gather" else None

    def op(self):
        c = self.coll
        if c == "all_reduce":
            dist.all_reduce(self.src)
        elif c == "broadcast":
            dist.broadcast(self.src, 0)
        elif c == "all_gather":
            dist.all_gather(self.outs, self.src)
        elif c == "alltoall":
            dist.all_to_all_single(self.out, self.src)
        else:
            dist.reduce_scatter(self.out[: self.chunk], list(self.src.split(self.chunk)))

    def check(self):
        """Runs one operation on known data and returns the wrong elements."""
        r, n, chunk = self.rank, self.n, self.chunk
        k = torch.arange(self.count, dtype=torch.int64)
        if self.coll == "all_reduce":
            # glooperf's data: every element rank+1, the sum n(n+1)/2.
            self.src.fill_(float(r + 1))
            self.op()
            return int((self.src != n * (n + 1) / 2).sum().item())
        if self.coll == "broadcast":
            self.src.copy_(value(0, k) if r == 0 else torch.full((self.count,), -1.0))
            self.op()
            return int((self.src != value(0, k).float()).sum().item())
        self.out.fill_(-1)
        if self.coll == "all_gather":
            self.src.copy_(value(r, k[:chunk]))
            self.op()
            want = value(k // chunk, k % chunk)
        elif self.coll == "alltoall":
            self.src.copy_(value(r, k))
            self.op()
            want = value(k // chunk, r * chunk + k % chunk)
        else:
            self.src.copy_(value(r, k))
            self.op()
            j = k[:chunk]
            want = 64 * n * (n + 1) // 2 + n * ((r * chunk + j) % 61)
            return int((self.out[:chunk] != want.float()).sum().item())
        return int((self.out != want.float()).sum().item())


def run_size(a, b, rank, n):
    """Times and checks one size; prints its row on rank 0."""
    count = max(1, b // 4)
    if a.c != "all_reduce" and a.c != "broadcast":
        block = (count // n) & ~3
        if block == 0:
            return  # too small to give every rank a 16-byte block
        count = block * n
    bench = Bench(a.c, count, rank, n)
    if a.c == "all_reduce":
        bench.src.fill_(float(rank + 1))
    for _ in range(a.w):
        bench.op()
    iters = a.n if b < (8 << 20) else max(3, a.n // 4)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        bench.op()
    dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    wrong = torch.tensor([bench.check()])
    dist.all_reduce(wrong)
    if rank == 0:
        nbytes = b if a.c == "all_reduce" else count * 4
        t = dt.item()
        alg = nbytes / t / 1e9
        redop = "sum" if a.c in ("all_reduce", "reduce_scatter") else "none"
        root = 0 if a.c == "broadcast" else -1
        print(f" {nbytes:>12} {bench.chunk:>12} {'float':>6} {redop:>6} {root:>6} {t * 1e6:>10.2f} "
              f"{alg:>8.2f} {alg * BUSFACTOR[a.c](n):>8.2f} {wrong.item():>6}", flush=True)


def main():
    ap = argparse.ArgumentParser(description="Gloo peer benchmark with nccl-tests columns")
    ap.add_argument("-c", default="all_reduce", choices=sorted(BUSFACTOR), help="collective")
    ap.add_argument("-b", type=size, default=8, help="smallest size in bytes (K, M, G suffixes)")
    ap.add_argument("-e", type=size, default=128 << 20, help="largest size in bytes")
    ap.add_argument("-f", type=int, default=4, help="size factor between rows (>= 2)")
    ap.add_argument("-n", type=int, default=20, help="timed iterations")
    ap.add_argument("-w", type=int, default=5, help="warm-up iterations")
    a = ap.parse_args()
    if a.f < 2 or a.n < 1 or a.w < 0 or a.e < a.b:
        ap.error(f"need -f >= 2, -n >= 1, -w >= 0 and -b <= -e (got -f {a.f} -n {a.n} -w {a.w} -b {a.b} -e {a.e})")
    try:
        # The timeout bounds the rendezvous and each operation: a missing
        # rank fails the run instead of hanging it.
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    except (ValueError, RuntimeError) as e:
        sys.exit(f"gloo_coll_perf: joining the job (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): {e}")
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        place = "in place" if a.c in ("all_reduce", "broadcast") else "out of place"
        print(f"# {a.c}, {n} ranks, torch {torch.__version__} Gloo peer ({place})")
        print(f"#{'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'root':>6} {'time':>10} "
              f"{'algbw':>8} {'busbw':>8} {'#wrong':>6}", flush=True)
    b = a.b
    try:
        while b <= a.e:
            run_size(a, b, rank, n)
            b *= a.f
    except RuntimeError as e:
        sys.exit(f"gloo_coll_perf: rank {rank}: {a.c} at {b} bytes: {e}")
    dist.destroy_process_group()


main()
