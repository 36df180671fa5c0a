# A PyTorch trainer rank of the torch-gloo example (see README.md): it joins
# the job's Gloo process group, where rank 0 is the Go data service
# (main.go), receives its share of every batch from it, and averages its
# gradients with the other trainers through all_reduce, in which the Go
# rank takes part (contributing zeros) to keep its own copy of the model.
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def main():
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, size = dist.get_rank(), dist.get_world_size()
    trainers = size - 1

    # The run's settings and the initial parameters come from the Go rank.
    cfg = torch.zeros(5, dtype=torch.float64)
    dist.broadcast(cfg, src=0)
    epochs, steps, batch, hidden = (int(v) for v in cfg[:4])
    lr = float(cfg[4])
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    params = list(model.parameters())
    vec = parameters_to_vector(params).detach()
    dist.broadcast(vec, src=0)
    vector_to_parameters(vec, params)

    x = torch.empty(batch * 64)
    y = torch.empty(batch, dtype=torch.int64)
    for _ in range(epochs):
        stats = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, samples
        for _ in range(steps):
            dist.recv(x, src=0, tag=0)
            dist.recv(y, src=0, tag=1)
            out = model(x.view(batch, 64))
            loss = F.cross_entropy(out, y)
            model.zero_grad()
            loss.backward()
            g = torch.cat([p.grad.flatten() for p in params])
            dist.all_reduce(g)  # the Go rank adds zeros
            g /= trainers
            with torch.no_grad():
                off = 0
                for p in params:
                    n = p.numel()
                    p -= lr * g[off:off + n].view_as(p)
                    off += n
            stats += torch.tensor([loss.item() * batch, (out.argmax(1) == y).sum().item(), batch], dtype=torch.float64)
        dist.all_reduce(stats)
    # Trainer rank 1's parameters, for the Go rank to compare with its copy.
    vec = parameters_to_vector(params).detach()
    dist.broadcast(vec, src=1)
    dist.destroy_process_group()
    print(f"trainer rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
