"""The layers and inputs of the tensor-parallel test, shared by the test and its workers."""

import torch

K, M1 = 256, 192          # column-parallel layer: M1 outputs split across ranks
COLS, M2 = M1, 128        # row-parallel layer: its K (= M1) split across ranks
T = 5                     # tokens
S1 = 2.0 ** -4            # power-of-two weight scales (see test_tp.py)
S2 = 2.0 ** -5


def full_layers():
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randint(-1, 2, (M1, K), generator=g).to(torch.int8)
    b1 = torch.randn(M1, generator=g)
    w2 = torch.randint(-1, 2, (M2, COLS), generator=g).to(torch.int8)
    # dyadic bias values with few bits: adding them to the shard sums is exact too
    b2 = torch.randint(-64, 65, (M2,), generator=g).float() / 64
    return w1, torch.tensor([S1]), b1, w2, torch.tensor([S2]), b2


def inputs(world: int = 2):
    g = torch.Generator().manual_seed(99)
    x = torch.randn(T, K, generator=g) * 2
    # z: every token's largest |value| is 127/64 in every rank's slice, so each rank's
    # per-token activation scale is 127 / (127/64) = 64, the same as the full input's
    z = (torch.rand(T, COLS, generator=g) * 2 - 1) * (127 / 64)
    w = COLS // world
    for r in range(world):
        z[:, r * w] = 127 / 64
    return x, z
