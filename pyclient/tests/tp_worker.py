"""One rank of the tensor-parallel test (test_tp.py): python tp_worker.py RANK WORLD DIR.

Every rank builds the same full layers from a seed, keeps its shard (column-parallel: rows of
W1; row-parallel: columns of W2), registers it with its own bitd (the embedded default), and
runs the sharded forward with torch.distributed (gloo) collectives."""

import os
import sys

import torch
import torch.distributed as dist

import bitgo
from tp_model import COLS, K, M1, M2, full_layers, inputs


def main():
    rank, world, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank,
                            world_size=world)
    w1, s1, b1, w2, s2, b2 = full_layers()
    rows = M1 // world
    col = bitgo.BitLinear(K, rows, config=bitgo.QuantConfig(format="i2s"))
    col.set_logical(w1[rank * rows:(rank + 1) * rows], s1, b1[rank * rows:(rank + 1) * rows])
    row = bitgo.BitLinear(COLS // world, M2, bias=rank == 0,
                          config=bitgo.QuantConfig(format="i2s"))
    row.set_logical(w2[:, rank * (COLS // world):(rank + 1) * (COLS // world)], s2,
                    b2 if rank == 0 else None)
    assert col.handle and row.handle
    x, z = inputs()
    with torch.no_grad():
        # column parallel, then gather the shards along the features
        h_r = col(x)
        parts = [torch.empty_like(h_r) for _ in range(world)]
        dist.all_gather(parts, h_r)
        h = torch.cat(parts, dim=-1)
        # row parallel on the gathered activations (the general case) ...
        w = COLS // world
        y = row(h[:, rank * w:(rank + 1) * w].contiguous())
        dist.all_reduce(y)
        # ... and on inputs made so that every rank's activation scales are the full ones
        yz = row(z[:, rank * w:(rank + 1) * w].contiguous())
        dist.all_reduce(yz)
    c = bitgo.default_client()
    torch.save({"h": h, "y": y, "yz": yz, "bitd_pid": c.server_pid,
                "how": c.how}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
