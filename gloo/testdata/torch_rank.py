# A Python rank of a mixed Python/Go torch.distributed Gloo job (gloo package
# tests). It joins with init_process_group("gloo", init_method="env://"),
# runs the same sequence of operations as the Go ranks (mixed_test.go's
# script), checks every result against the value computed here, and prints
# "result NAME SHA256" for each, so the test can compare the bits across
# ranks. Exit status 1 on a wrong result.
import datetime
import hashlib
import os
import sys

import torch
import torch.distributed as dist


def values(n, rank, k, dtype):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + k) % 97 - 40).to(dtype)


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    if os.environ.get("GLOO_TEST_PY_EXIT_RANK") == str(rank):
        os._exit(3)  # a rank that dies after joining (the failure tests)
    bad = 0

    def report(name, got, want):
        nonlocal bad
        if not torch.equal(got, want):
            diff = (got != want).nonzero()
            print(f"rank {rank}: {name}: wrong at {diff[:5].flatten().tolist()}: got {got.flatten()[:5].tolist()} want {want.flatten()[:5].tolist()}", flush=True)
            bad += 1
        print(f"result {name} {hashlib.sha256(got.numpy().tobytes()).hexdigest()}", flush=True)

    k = 0
    for dtype, dname in ((torch.float32, "float32"), (torch.int64, "int64"), (torch.float64, "float64"), (torch.uint8, "uint8")):
        for n in (0, 1, 7, 1000003):
            k += 1
            t = values(n, rank, k, dtype)
            dist.all_reduce(t)
            want = sum(values(n, r, k, torch.int64) for r in range(size)).to(dtype)
            report(f"all_reduce.sum.{dname}.{n}", t, want)
        k += 1
        t = values(1000, rank, k, dtype)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        want = torch.stack([values(1000, r, k, dtype) for r in range(size)]).max(dim=0).values
        report(f"all_reduce.max.{dname}.1000", t, want)
        for root in range(size):
            for n in (5, 300001):
                k += 1
                t = values(n, rank, k, dtype) if rank == root else torch.zeros(n, dtype=dtype)
                dist.broadcast(t, src=root)
                report(f"broadcast.{root}.{dname}.{n}", t, values(n, root, k, dtype))
        for n in (1, 3, 100000):
            k += 1
            outs = [torch.zeros(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, values(n, rank, k, dtype))
            report(f"all_gather.{dname}.{n}", torch.cat(outs), torch.cat([values(n, r, k, dtype) for r in range(size)]))
        dist.barrier()
        # Point to point: each rank sends to the next, receives from the previous.
        k += 1
        nxt, prv = (rank + 1) % size, (rank + size - 1) % size
        out = values(1000, rank, k, dtype)
        got = torch.zeros(1000, dtype=dtype)
        req = dist.isend(out, nxt, tag=7)
        dist.recv(got, src=prv, tag=7)
        req.wait()
        report(f"recv.{dname}.from_previous", got, values(1000, prv, k, dtype))
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} done, {bad} wrong", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
