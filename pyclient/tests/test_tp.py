"""Tensor parallelism: two processes (torch.distributed, gloo), each with its own bitd, hold
half of a column-parallel and half of a row-parallel layer; the gathered / all-reduced
results are compared with one process holding the whole layers.

Which results are bit-exact, and why:
- column parallel (each rank computes whole output rows): equal to the single process bit
  for bit, always;
- row parallel (each rank sums over half of the inputs): each rank quantizes its half of the
  activations with its own per-token scale, so in general the sum differs from the single
  process's product by up to the activation quantization error. It is checked (1) bit for bit
  against the sum of the two shards' bitgo.reference results (what the ranks must compute),
  and (2) against the single process within the bound that error gives:
      |y_tp - y_1| <= ws * sum_k |w_jk| * (0.5 / xs_full + 0.5 / xs_rank(k)) (+ float32 rounding);
- row parallel on inputs made so that every rank's activation scale equals the full input's
  (each half holds the token's largest |value|, 127/64, so every scale is exactly 64) with
  power-of-two weight scales and a dyadic bias: every partial product and sum is exact in
  float32, so the all-reduced result equals the single process bit for bit.
"""

import os
import subprocess
import sys

import torch

import bitgo
from bitgo import reference as R
from conftest import REPO, assert_bits_equal

sys.path.insert(0, os.path.dirname(__file__))
from tp_model import COLS, K, M1, M2, full_layers, inputs  # noqa: E402

WORLD = 2


def test_two_ranks_each_with_its_own_bitd(tmp_path):
    env = dict(os.environ)
    env.pop("BITD_SOCKET", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path)  # no shared daemon: each rank starts its own
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "pyclient"), os.path.dirname(__file__)])
    worker = os.path.join(os.path.dirname(__file__), "tp_worker.py")
    procs = [subprocess.Popen([sys.executable, worker, str(r), str(WORLD), str(tmp_path)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(WORLD)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=180)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{outs[r]}"
    res = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    pids = {r["bitd_pid"] for r in res}
    assert len(pids) == WORLD and all(r["how"] == "embedded" for r in res)

    w1, s1, b1, w2, s2, b2 = full_layers()
    x, z = inputs(WORLD)
    cfg = bitgo.QuantConfig(format="i2s")
    col = bitgo.BitLinear(K, M1, config=cfg)
    col.set_logical(w1, s1, b1)
    row = bitgo.BitLinear(COLS, M2, config=cfg)
    row.set_logical(w2, s2, b2)
    assert row.remote.client.server_pid not in pids

    # column parallel: bit for bit
    h = col(x)
    for r in res:
        assert_bits_equal(r["h"], h, "column-parallel gathered output")

    # row parallel, general inputs: exactly the sum of the shards' reference results ...
    w = COLS // WORLD
    shards = [R.linear_logical(h[:, i * w:(i + 1) * w], w2[:, i * w:(i + 1) * w], s2,
                               b2 if i == 0 else None, cfg) for i in range(WORLD)]
    want = shards[0] + shards[1]
    for r in res:
        assert_bits_equal(r["y"], want, "row-parallel all-reduced output vs shard references")
    # ... and within the activation quantization bound of the single process
    y1 = row(h)
    amax_full = h.abs().amax(dim=1).clamp_min(1e-5).double()
    bound = torch.zeros_like(y1, dtype=torch.float64)
    for i in range(WORLD):
        sl = slice(i * w, (i + 1) * w)
        amax_r = h[:, sl].abs().amax(dim=1).clamp_min(1e-5).double()
        step = 0.5 * amax_full / 127 + 0.5 * amax_r / 127  # [T]: 0.5/xs_full + 0.5/xs_rank
        bound += step[:, None] * w2[:, sl].abs().sum(dim=1).double()[None, :]
    bound = bound * float(s2) * (1 + 1e-5) + 4 * torch.finfo(torch.float32).eps * y1.abs()
    diff = (res[0]["y"].double() - y1.double()).abs()
    assert bool((diff <= bound).all()), f"max excess {(diff - bound).max().item():g}"
    assert not torch.equal(res[0]["y"], y1)  # the general case is genuinely not exact

    # row parallel with equal activation scales on every rank: bit for bit
    yz = row(z)
    for r in res:
        assert_bits_equal(r["yz"], yz, "row-parallel, equal activation scales")
