"""The Python client's round-trip overhead (the closing note's "p50 <= 10 us at 16 KiB").

    PYTHONPATH=pyclient /usr/bin/python3 pyclient/bench/roundtrip.py [--iters 5000]

Starts a private bitd (or uses BITD_SOCKET) and measures, per call, with time.perf_counter_ns:
- ping: an empty request and answer;
- forward with 16 KiB in (one float32 token of 4096 inputs into a 4096 -> 64 i2s layer) and
  with 16 KiB out (64 -> 4096); the overhead is the call's wall time minus the compute time
  bitd reports with the answer (so it is the client, the copies in and out, the
  shared-memory round trip and bitd's request handling);
- the same through BitLinear (the torch operator bitgo::linear, its checks and the runner).
Prints p50/p90/p99 in microseconds. Timings drift on a shared VM: compare within one run.
"""

import argparse
import os
import sys
import time

import torch

import bitgo
from bitgo.client import Client


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def show(name, ns):
    us = [x / 1e3 for x in ns]
    print(f"  {name:44s} p50 {pct(us, .5):7.2f}  p90 {pct(us, .9):7.2f}  "
          f"p99 {pct(us, .99):8.2f} us")
    return pct(us, .5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--k", type=int, default=4096)
    args = ap.parse_args()
    c = Client(embedded=None if os.environ.get("BITD_SOCKET") else True)
    print(f"bitd pid {c.server_pid} ({c.how}); torch {torch.__version__}; "
          f"python {sys.version.split()[0]}; {args.iters} calls each")
    now = time.perf_counter_ns
    n = args.iters
    for _ in range(500):
        c.ping()
    ping = []
    for _ in range(n):
        t = now()
        c.ping()
        ping.append(now() - t)

    g = torch.Generator().manual_seed(0)
    res = {}
    # 16 KiB in (one float32 token of 4096 inputs) to a narrow layer, and 16 KiB back from a
    # wide one: bitd's compute stays a few microseconds, so the figures are the transport's
    for name, k, m in (("16 KiB in (4096 -> 64)", args.k, 64),
                       ("16 KiB out (64 -> 4096)", 64, args.k)):
        w = torch.randint(-1, 2, (m, k), generator=g).to(torch.int8)
        b = bitgo.BitLinear(k, m, bias=False, config=bitgo.QuantConfig(format="i2s"))
        b.set_logical(w, torch.tensor([0.01]))
        b.attach(c)
        lid = b.remote.id
        x = torch.randn(1, k, generator=g)
        for _ in range(500):
            c._forward(lid, x, m)
        wall, comp = [], []
        for _ in range(n):
            t = now()
            _, ns = c._forward(lid, x, m)
            wall.append(now() - t)
            comp.append(ns)
        op_wall, hs = [], []
        with torch.no_grad():
            for _ in range(500):
                b(x)
            for _ in range(n):
                h = c.handler_ns
                t = now()
                b(x)
                op_wall.append(now() - t)
                hs.append(c.handler_ns - h)
        print(f"{name}:")
        show("forward wall (Client)", wall)
        show("  bitd compute (reported)", comp)
        res[name] = show("  overhead = wall - compute (Client)", [a - b_ for a, b_ in
                                                                   zip(wall, comp)])
        show("forward wall (BitLinear -> bitgo::linear)", op_wall)
        show("  overhead = wall - compute (BitLinear)", [a - b_ for a, b_ in zip(op_wall, hs)])
        b.detach()
    show("ping round trip", ping)
    first = next(iter(res.values()))
    print(f"client round-trip overhead at 16 KiB: p50 {first:.2f} us (target <= 10 us)")
    c.close()


if __name__ == "__main__":
    main()
