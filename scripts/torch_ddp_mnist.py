#!/usr/bin/python3
"""PyTorch DistributedDataParallel (Gloo) twin of examples/ddp-mnist.

The same MLP (784-1024-256-10, ReLU, softmax cross-entropy; He-normal weights
in front of each ReLU, Glorot-normal in the last layer, zero biases), Adam
(betas 0.9/0.999, eps 1e-8) with the learning rate's cosine decay over the
run, the global batch split over the ranks in contiguous shards (the first
batch % N ranks take one sample more) and the same MNIST files, read from
examples/internal/mnist/data. Each rank scales its summed loss by N/B, so that
DDP's average over the ranks is the gradient of the mean loss over the whole
batch of B, however B splits (as goccl's example does).

Ranks are processes started with torch.multiprocessing, rendezvous on
127.0.0.1 at a free port, one intra-op thread each (-threads). Rank 0 prints
a line in the format of the goccl example's summary (step_ms: mean wall time
of a whole step after the warm-up; bytes_per_step: the float32 gradient DDP
reduces per step). Needs torch (Debian python3-torch): run with /usr/bin/python3.

    /usr/bin/python3 scripts/torch_ddp_mnist.py -np 4 -steps 200
    /usr/bin/python3 scripts/torch_ddp_mnist.py -np 4 -steps 200 -zero

-zero shards Adam's state with torch.distributed.optim.ZeroRedundancyOptimizer
(ZeRO-1: DDP all-reduces the gradients, each rank updates its partition of the
parameters, and the updated partitions are broadcast), the twin of
examples/fsdp-mnist -stage 1.
"""
import argparse
import gzip
import math
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "internal", "mnist", "data")


def read_idx(name, header):
    """The bytes of an IDX file of unsigned bytes after its header."""
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


def load(kind):
    images = read_idx(f"{kind}-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    labels = read_idx(f"{kind}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    assert len(images) == len(labels)
    return images, labels


def shard(n, size, rank):
    """[lo, hi) of rank's contiguous share of n items (as ddp.Shard)."""
    q, r = divmod(n, size)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def batch(images, labels, idx):
    x = torch.from_numpy(images[idx]).float().mul_(1 / 255)
    return x, torch.from_numpy(labels[idx])


def model(sizes):
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        lin = nn.Linear(fan_in, fan_out)
        last = i == len(sizes) - 2
        nn.init.normal_(lin.weight, std=math.sqrt(2 / (fan_in + fan_out) if last else 2 / fan_in))
        nn.init.zeros_(lin.bias)
        layers += [lin] if last else [lin, nn.ReLU()]
    return nn.Sequential(*layers)


def worker(rank, a, port):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.np)
    torch.manual_seed(a.seed)  # DDP broadcasts rank 0's parameters anyway
    sizes = [784] + [int(w) for w in a.hidden.split(",")] + [10]
    net = model(sizes)
    ddp = DistributedDataParallel(net, bucket_cap_mb=a.bucket_mb)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    else:
        opt = torch.optim.Adam(ddp.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    (xs, ys), (xt, yt) = load("train"), load("t10k")
    n = len(ys)
    per_epoch = -(-n // a.batch)
    total = a.steps if a.steps > 0 else a.epochs * per_epoch
    warmup = min(10, total // 2)
    step, timed = 0, 0.0
    while step < total:
        perm = np.random.default_rng([a.seed, step // per_epoch + 1]).permutation(n)
        for s in range(0, n, a.batch):
            if step == total:
                break
            for g in opt.param_groups:
                g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            t0 = time.perf_counter()
            idx = perm[s:s + a.batch]
            lo, hi = shard(len(idx), a.np, rank)
            x, y = batch(xs, ys, idx[lo:hi])
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(ddp(x), y, reduction="sum") * (a.np / len(idx))
            loss.backward()
            opt.step()
            step += 1
            if step > warmup:
                timed += time.perf_counter() - t0
    # Test accuracy: each rank scores its shard; one all-reduce adds the counts.
    lo, hi = shard(len(yt), a.np, rank)
    with torch.no_grad():
        x, y = batch(xt, yt, np.arange(lo, hi))
        counts = torch.tensor([(net(x).argmax(1) == y).sum().item(), hi - lo], dtype=torch.float64)
    dist.all_reduce(counts)
    if rank == 0:
        nbytes = 4 * sum(p.numel() for p in net.parameters())
        print(f"summary: ranks={a.np} batch={a.batch} steps={step} warmup={warmup} "
              f"step_ms={1e3 * timed / max(step - warmup, 1):.3f} bytes_per_step={nbytes} "
              f"accuracy={(counts[0] / counts[1]).item():.4f} threads={a.threads} zero={int(a.zero)} torch={torch.__version__}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-np", type=int, default=4, help="world size")
    p.add_argument("-steps", type=int, default=0, help="steps in total (0: -epochs full epochs)")
    p.add_argument("-epochs", type=int, default=5)
    p.add_argument("-batch", type=int, default=128, help="global batch, split over the ranks")
    p.add_argument("-hidden", default="1024,256")
    p.add_argument("-lr", type=float, default=1e-3)
    p.add_argument("-seed", type=int, default=1)
    p.add_argument("-bucket-mb", type=float, default=25, dest="bucket_mb")
    p.add_argument("-threads", type=int, default=1, help="torch.set_num_threads per rank")
    p.add_argument("-zero", action="store_true", help="ZeroRedundancyOptimizer (Adam's state sharded over the ranks)")
    a = p.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:  # a free port (released just before the ranks bind it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.np)


if __name__ == "__main__":
    main()
