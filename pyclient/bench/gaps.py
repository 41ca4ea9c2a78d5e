"""How the time between calls changes a call's overhead (why a model's IPC share can be far
above the round-trip benchmark's).

    PYTHONPATH=pyclient /usr/bin/python3 pyclient/bench/gaps.py [--calls 400]

Runs a 2560 -> 2560 i2s layer (one float32 token) with the client busy in Python for a fixed
gap before each call (as a model is busy with norms and attention between linear layers),
and prints, per gap: how often bitd's session thread had gone to sleep (its sleeping flag
was set when the request was published, so the client had to wake it with FUTEX_WAKE) and
the overhead (call wall time minus bitd's reported compute time).
"""

import argparse
import statistics as st
import time

import torch

import bitgo
import bitgo.client as bc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--gaps", default="0,20,50,100,200,400,800")
    args = ap.parse_args()
    torch.set_num_threads(1)
    c = bitgo.Client(embedded=True)
    b = bitgo.BitLinear(2560, 2560, bias=False)
    b.attach(c)
    x = torch.randn(1, 2560)
    lid = b.remote.id
    now = time.perf_counter_ns

    def busy(us):
        end = now() + us * 1000
        while now() < end:
            pass

    print(f"bitd pid {c.server_pid}; {args.calls} calls per gap")
    for gap in (int(g) for g in args.gaps.split(",")):
        asleep, over, comp = 0, [], []
        for _ in range(args.calls):
            busy(gap)
            asleep += c._w[bc._SERVER_SLEEPING]
            t, h = now(), c.handler_ns
            c._forward(lid, x, 2560)
            over.append(now() - t - (c.handler_ns - h))
            comp.append(c.handler_ns - h)
        print(f"  gap {gap:5d} us: bitd asleep at {100 * asleep / args.calls:5.1f}% of calls; "
              f"overhead p50 {st.median(over) / 1e3:6.1f} us, mean {st.mean(over) / 1e3:6.1f} "
              f"us; bitd compute p50 {st.median(comp) / 1e3:6.1f} us")
    c.close()


if __name__ == "__main__":
    main()
