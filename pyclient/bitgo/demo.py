"""The end-to-end demo (``make demo``): a decoder with the shapes of BitNet b1.58 2B4T, written
in plain PyTorch, generates 64 tokens with ``nn.Linear`` in float32 and in bfloat16, then
with ``bitgo.quantize_`` (ternary i2s weights computed by bitd), and checks that the bitgo
path's logits equal the reference path's exactly.

    PYTHONPATH=pyclient /usr/bin/python3 -m bitgo.demo            # the full model (~2-4 min)
    PYTHONPATH=pyclient /usr/bin/python3 -m bitgo.demo --layers 2 # a quick look

The model: 30 blocks, hidden 2560, FFN 6912, 20 attention heads over 5 KV heads (head size
128), RMSNorm (and BitNet's sub-norms before o_proj and down_proj), rotary position
embeddings (theta 500000) with a KV cache, a squared-ReLU gated FFN, random ternary weights
(times a per-layer scale), a small vocabulary (float embedding and lm_head, which quantize_
leaves alone). Every step feeds one token (the prompt too), so every step has the same shapes.

The exactness check ("the reference path") runs the same model with every quantized linear
layer computed by ``bitgo.reference`` on the token sequence the bitgo path produced, and
compares the logits of every step bit for bit. It goes layer by layer (a layer's 72 token
rows in one reference product, so each layer's weights are unpacked once, not once per token)
while everything else (norms, rotary, attention with the KV cache, the FFN activation,
residuals, lm_head) runs token by token through the very same code and shapes as decoding.
This gives the same logits as decoding with the reference linears token by token: their rows
are independent (per-token activation scales, exact integer sums), so each row is what a
one-token call returns. Equal logits at every step also mean the reference path would have
chosen the same tokens.

Speed is tokens per second over the generated tokens (greedy decoding). The time spent in
bitgo's linear layers (measured around ``BitLinear.forward``) splits three ways: bitd
computing (bitd reports its compute time with every answer); the "IPC share", the time in
``bitgo.Client`` that is not bitd computing (copying activations in and outputs out of the
shared memory, publishing the request, waiting beyond the compute, reading the answer); and
the host side, BitLinear.forward and the ``bitgo::linear`` operator's dispatch and checks,
which any custom operator pays.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import resource
import sys
import time
from typing import Dict, List, Optional

import numpy as np
import torch
from torch import nn

import bitgo
from bitgo import reference as R


class Shape:
    """BitNet b1.58 2B4T's decoder shapes."""

    def __init__(self, layers=30, hidden=2560, ffn=6912, heads=20, kv_heads=5, vocab=4096,
                 rope_theta=500000.0, eps=1e-5):
        self.layers, self.hidden, self.ffn = layers, hidden, ffn
        self.heads, self.kv_heads, self.vocab = heads, kv_heads, vocab
        self.head_dim = hidden // heads
        self.rope_theta, self.eps = rope_theta, eps

    def linear_weights(self) -> int:
        h, f, kv = self.hidden, self.ffn, self.kv_heads * self.head_dim
        return self.layers * (2 * h * h + 2 * h * kv + 3 * h * f)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, gen: torch.Generator):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim, generator=gen),
                                   requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        v = xf.pow(2).mean(-1, keepdim=True)
        return (xf * torch.rsqrt(v + self.eps)).to(x.dtype) * self.weight


def relu2(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x).square()


class Rotary:
    def __init__(self, s: Shape, max_pos: int):
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float64)
                                      / s.head_dim))
        ang = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], dim=-1).float()
        self.sin = torch.cat([ang.sin(), ang.sin()], dim=-1).float()

    def apply(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """x: [heads, head_dim] at one position."""
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos[pos].to(x.dtype) + rot * self.sin[pos].to(x.dtype)


class KVCache:
    def __init__(self, s: Shape, layers: int, max_pos: int, dtype: torch.dtype):
        self.k = torch.zeros(layers, s.kv_heads, max_pos, s.head_dim, dtype=dtype)
        self.v = torch.zeros(layers, s.kv_heads, max_pos, s.head_dim, dtype=dtype)


class Block(nn.Module):
    """One decoder block; the decoding step and the reference check share its stages."""

    def __init__(self, s: Shape, idx: int, gen: torch.Generator, seed: int, fused: bool = True):
        super().__init__()
        self.s, self.idx, self.fused = s, idx, fused
        h, f, kv = s.hidden, s.ffn, s.kv_heads * s.head_dim
        self.splits = ([h, kv, kv], [f, f])
        self.attn_norm = RMSNorm(h, s.eps, gen)
        self.attn_sub_norm = RMSNorm(h, s.eps, gen)
        self.ffn_norm = RMSNorm(h, s.eps, gen)
        self.ffn_sub_norm = RMSNorm(f, s.eps, gen)
        rng = np.random.default_rng(seed)
        if fused:  # as vLLM runs it: merged QKV and gate/up projections
            mats = (("qkv_proj", h + 2 * kv, h), ("o_proj", h, h), ("gate_up_proj", 2 * f, h),
                    ("down_proj", h, f))
        else:
            mats = (("q_proj", h, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, h),
                    ("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f))
        for name, out, inp in mats:
            setattr(self, name, ternary_linear(rng, out, inp))

    def qkv(self, h: torch.Tensor):
        if self.fused:
            return self.qkv_proj(h).split(self.splits[0], dim=-1)
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)

    def gate_up(self, h: torch.Tensor):
        if self.fused:
            return self.gate_up_proj(h).split(self.splits[1], dim=-1)
        return self.gate_proj(h), self.up_proj(h)

    # stages (shared by decoding and the reference check)
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache,
               rope: Rotary, pos: int) -> torch.Tensor:
        s = self.s
        d, g = s.head_dim, s.heads // s.kv_heads
        q = rope.apply(q.view(s.heads, d), pos)
        k = rope.apply(k.view(s.kv_heads, d), pos)
        cache.k[self.idx, :, pos] = k
        cache.v[self.idx, :, pos] = v.view(s.kv_heads, d)
        ks = cache.k[self.idx, :, : pos + 1]
        vs = cache.v[self.idx, :, : pos + 1]
        scores = torch.matmul(q.view(s.kv_heads, g, d), ks.transpose(1, 2)) / math.sqrt(d)
        p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return self.attn_sub_norm(torch.matmul(p, vs).reshape(1, s.heads * d))

    def ffn_act(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return self.ffn_sub_norm(relu2(gate) * up)

    def step(self, x: torch.Tensor, cache: KVCache, rope: Rotary, pos: int) -> torch.Tensor:
        """One token: x is [1, hidden]."""
        h = self.attn_norm(x)
        a = self.attend(*self.qkv(h), cache, rope, pos)
        x = x + self.o_proj(a)
        h = self.ffn_norm(x)
        return x + self.down_proj(self.ffn_act(*self.gate_up(h)))


def ternary_linear(rng: np.random.Generator, out: int, inp: int) -> nn.Linear:
    """nn.Linear whose weights are random ternary values times a scale (so that outputs
    keep about the inputs' magnitude)."""
    lin = nn.Linear(inp, out, bias=False, device="meta")
    w = torch.from_numpy(rng.integers(-1, 2, size=(out, inp), dtype=np.int8))
    scale = 1.0 / math.sqrt(inp * 2 / 3)
    lin.weight = nn.Parameter(w.to(torch.float32).mul_(scale), requires_grad=False)
    return lin


class Decoder(nn.Module):
    def __init__(self, s: Shape, seed: int = 0, fused: bool = True):
        super().__init__()
        self.s = s
        gen = torch.Generator().manual_seed(seed)
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden)
        self.embed_tokens.weight.requires_grad_(False).normal_(generator=gen)
        self.layers = nn.ModuleList(Block(s, i, gen, seed * 1000 + i, fused) for i in range(s.layers))
        self.norm = RMSNorm(s.hidden, s.eps, gen)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)
        self.lm_head.weight.requires_grad_(False).normal_(std=s.hidden ** -0.5, generator=gen)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def step(self, token: int, cache: KVCache, rope: Rotary, pos: int) -> torch.Tensor:
        x = self.embed_tokens.weight[token].view(1, -1)
        for blk in self.layers:
            x = blk.step(x, cache, rope, pos)
        return self.lm_head(self.norm(x))


def nn_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def generate(model: Decoder, prompt: List[int], new_tokens: int, keep_logits=False):
    """Greedy decoding, one token per step. Returns (tokens, per-step logits or None,
    seconds spent on the steps that produced the new tokens)."""
    s = model.s
    total = len(prompt) + new_tokens
    cache = KVCache(s, s.layers, total, model.dtype)
    rope = Rotary(s, total)
    tokens = list(prompt)
    logits_all = []
    t_gen = 0.0
    with torch.no_grad():
        for pos in range(total - 1):
            t0 = time.perf_counter()
            logits = model.step(tokens[pos], cache, rope, pos)
            nxt = int(torch.argmax(logits.float(), dim=-1))
            dt = time.perf_counter() - t0
            if pos >= len(prompt) - 1:
                t_gen += dt
            if keep_logits:
                logits_all.append(logits.clone())
            if pos + 1 >= len(tokens):
                tokens.append(nxt)
    return tokens, (logits_all if keep_logits else None), t_gen


def reference_logits(model: Decoder, tokens: List[int], progress=None) -> List[torch.Tensor]:
    """The logits of every step for this token sequence, with every BitLinear computed by
    bitgo.reference (see the module docstring for why layer by layer gives the same logits
    as token by token)."""
    s = model.s
    steps = len(tokens) - 1
    cache = KVCache(s, s.layers, steps, model.dtype)
    rope = Rotary(s, steps)

    def lin(mod, xs: List[torch.Tensor]) -> List[torch.Tensor]:
        y = R.linear(mod, torch.cat(xs, dim=0))
        return [y[t: t + 1].clone() for t in range(len(xs))]

    def lins(blk, names, splits, xs):
        if blk.fused:
            ys = lin(getattr(blk, names[0]), xs)
            return list(zip(*(y.split(splits, dim=-1) for y in ys)))
        return [lin(getattr(blk, n), xs) for n in names[1:]]

    with torch.no_grad():
        xs = [model.embed_tokens.weight[tokens[t]].view(1, -1) for t in range(steps)]
        for i, blk in enumerate(model.layers):
            hs = [blk.attn_norm(x) for x in xs]
            qs, ks, vs = lins(blk, ("qkv_proj", "q_proj", "k_proj", "v_proj"), blk.splits[0], hs)
            a = [blk.attend(qs[t], ks[t], vs[t], cache, rope, t) for t in range(steps)]
            os_ = lin(blk.o_proj, a)
            xs = [xs[t] + os_[t] for t in range(steps)]
            hs = [blk.ffn_norm(x) for x in xs]
            gs, us = lins(blk, ("gate_up_proj", "gate_proj", "up_proj"), blk.splits[1], hs)
            fs = [blk.ffn_act(gs[t], us[t]) for t in range(steps)]
            ds = lin(blk.down_proj, fs)
            xs = [xs[t] + ds[t] for t in range(steps)]
            if progress:
                progress(i + 1, s.layers)
        return [model.lm_head(model.norm(x)) for x in xs]


def set_threads(n: int) -> None:
    """torch's threads and, when torch's BLAS is OpenBLAS, OpenBLAS's: its worker threads spin
    for a long while after every call (lm_head's, here), and on a small machine they take the
    cores bitd computes on."""
    torch.set_num_threads(n)
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            fn = getattr(ctypes.CDLL(name), "openblas_set_num_threads", None)
        except OSError:
            continue
        if fn is not None:
            fn(int(n))
            return


def fastest_threads(model: Decoder, cores: int) -> int:
    """The torch thread count (1 or every core) that decodes this model faster here: Debian's
    torch 1.13 runs bfloat16 linears faster on one thread, float32 ones through OpenBLAS on
    any. Each baseline gets its best setting."""
    if cores <= 1:
        return 1
    best, pick = float("inf"), cores
    s = model.s
    for n in (cores, 1):
        set_threads(n)
        cache, rope = KVCache(s, s.layers, 3, model.dtype), Rotary(s, 3)
        with torch.no_grad():
            model.step(1, cache, rope, 0)
            t = time.perf_counter()
            model.step(2, cache, rope, 1)
            model.step(3, cache, rope, 2)
            dt = time.perf_counter() - t
        if dt < best:
            best, pick = dt, n
    set_threads(pick)
    return pick


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def log(msg: str) -> None:
    print(msg, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bitgo.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=64, help="tokens to generate")
    ap.add_argument("--prompt", type=int, default=4, help="prompt length")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--format", default="i2s", help="bitgo weight format (ternary: i2s, tl1, tl2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-bf16", action="store_true", help="skip the bfloat16 baseline")
    ap.add_argument("--skip-check", action="store_true", help="skip the exactness check")
    ap.add_argument("--unfused", action="store_true",
                    help="separate q/k/v and gate/up projections (7 linear calls per layer, "
                         "not the 4 of merged QKV and gate/up that vLLM runs)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.tokens < 1 or args.prompt < 1 or args.layers < 1:
        ap.error("--tokens, --prompt and --layers must be >= 1")

    cores = len(os.sched_getaffinity(0))
    if not os.environ.get("OMP_NUM_THREADS"):
        set_threads(cores)
    s = Shape(layers=args.layers, vocab=args.vocab)
    fmt = args.format
    cfg = bitgo.QuantConfig(format=fmt)
    if not cfg.is_ternary:
        ap.error(f"--format {fmt}: the demo's weights are ternary: use i2s, tl1 or tl2")
    torch.manual_seed(args.seed)
    prompt = [int(t) for t in torch.randint(0, s.vocab, (args.prompt,),
                                            generator=nn_generator(args.seed))]
    nlin = s.linear_weights()
    log(f"bitgo demo: BitNet b1.58 2B4T shapes: {s.layers} layers, hidden {s.hidden}, FFN "
        f"{s.ffn}, {s.heads} heads / {s.kv_heads} KV heads, vocab {s.vocab}; "
        f"{nlin / 1e9:.2f} B linear weights; prompt {args.prompt} tokens, {args.tokens} new "
        f"tokens; torch {torch.__version__}, {torch.get_num_threads()} threads, {cores} cores")
    res: Dict[str, object] = {"layers": s.layers, "tokens": args.tokens, "prompt": args.prompt,
                              "vocab": s.vocab, "linear_weights": nlin, "format": fmt,
                              "torch": torch.__version__}

    t = time.perf_counter()
    model = Decoder(s, seed=args.seed, fused=not args.unfused)
    log(f"  built the float32 model in {time.perf_counter() - t:.1f} s "
        f"({4 * nlin / 1e9:.1f} GB of linear weights)")

    rows = []
    nt = fastest_threads(model, cores)
    toks_fp32, _, sec = generate(model, prompt, args.tokens)
    rows.append(("torch nn.Linear float32", args.tokens / sec, 4 * nlin))
    log(f"  float32: {args.tokens / sec:6.2f} tokens/s ({nt} torch threads)")
    res["threads_fp32"] = nt
    if not args.skip_bf16:
        model.to(torch.bfloat16)
        gc.collect()
        nt = fastest_threads(model, cores)
        _, _, sec = generate(model, prompt, args.tokens)
        rows.append(("torch nn.Linear bfloat16", args.tokens / sec, 2 * nlin))
        log(f"  bfloat16: {args.tokens / sec:6.2f} tokens/s ({nt} torch threads)")
        res["threads_bf16"] = nt
    set_threads(cores)

    # bitgo: quantize the (float) model in place, compute activations in float32. bitd's
    # threads do the linear layers; torch and OpenBLAS keep one thread, so that their
    # workers do not spin on the cores bitd computes on.
    t = time.perf_counter()
    client = bitgo.default_client()
    bitgo.quantize_(model, cfg)
    model.float()
    gc.collect()
    qsec = time.perf_counter() - t
    torch_threads = torch.get_num_threads()
    set_threads(1)
    d = client.daemon
    where = (f"a private bitd (pid {d.pid}, started by bitgo.Client)" if d is not None
             else f"bitd at {client.socket_path} (pid {client.server_pid})")
    threads = int(client.stats().get("engine", {}).get("threads", 0)) or "?"
    log(f"  quantize_ ({fmt}) and registration with {where}, {threads} threads: {qsec:.1f} s")
    res["bitd_threads"] = threads
    nb = sum(m.packed.numel() for m in model.modules() if isinstance(m, bitgo.BitLinear))
    generate(model, prompt[:2], 2)  # warm-up: first-call paths in the daemon and the op
    client.forward_calls = client.handler_ns = client.client_ns = 0
    with bitgo.nn.LinearTimer() as timer:
        toks, logits, sec = generate(model, prompt, args.tokens, keep_logits=True)
    tps = args.tokens / sec
    rows.append((f"bitgo {fmt} (bitd)", tps, nb))
    lin_ns, handler_ns, client_ns = timer.ns, client.handler_ns, client.client_ns
    steps = len(toks) - 1
    ipc_share = (client_ns - handler_ns) / lin_ns if lin_ns else float("nan")
    host_share = (lin_ns - client_ns) / lin_ns if lin_ns else float("nan")
    log(f"  bitgo: {tps:6.2f} tokens/s")

    log("")
    log(f"  {'path':28s} {'tokens/s':>9s} {'ms/token':>9s} {'weights/token':>14s}")
    for name, r, nbytes in rows:
        log(f"  {name:28s} {r:9.2f} {1000 / r:9.1f} {nbytes / 1e9:11.2f} GB")
    base = {n: r for n, r, _ in rows}
    sp32 = tps / base["torch nn.Linear float32"]
    line = f"  speed-up of bitgo: {sp32:.1f}x over float32"
    res.update(tokens_per_s={n: r for n, r, _ in rows}, speedup_fp32=sp32)
    if "torch nn.Linear bfloat16" in base:
        sp16 = tps / base["torch nn.Linear bfloat16"]
        line += f", {sp16:.1f}x over bfloat16"
        res["speedup_bf16"] = sp16
    log(line)
    per_step = timer.calls / max(steps, 1)
    calls = max(timer.calls, 1)
    log(f"  time in linear layers: {lin_ns / 1e6 / steps:.1f} ms/token of "
        f"{1000 * sec / args.tokens:.1f} ({per_step:.0f} calls); bitd computing "
        f"{handler_ns / 1e6 / steps:.1f} ms/token")
    log(f"  IPC share of linear-layer time {100 * ipc_share:.1f}% "
        f"({(client_ns - handler_ns) / calls / 1e3:.1f} us per call); BitLinear and the "
        f"bitgo::linear operator {100 * host_share:.1f}% ({(lin_ns - client_ns) / calls / 1e3:.1f}"
        f" us per call)")
    res.update(ipc_share=ipc_share, host_share=host_share,
               linear_ms_per_token=lin_ns / 1e6 / steps,
               bitd_ms_per_token=handler_ns / 1e6 / steps,
               ipc_us_per_call=(client_ns - handler_ns) / calls / 1e3,
               host_us_per_call=(lin_ns - client_ns) / calls / 1e3,
               overhead_us_per_call=(lin_ns - handler_ns) / calls / 1e3)

    ok = True
    set_threads(torch_threads)
    if not args.skip_check:
        t = time.perf_counter()
        ref = reference_logits(model, toks)
        bad = [i for i, (a, b) in enumerate(zip(logits, ref))
               if not torch.equal(a.view(torch.int32), b.view(torch.int32))]
        ok = not bad and len(ref) == len(logits)
        csec = time.perf_counter() - t
        if ok:
            log(f"  exact: the logits of all {len(ref)} steps equal bitgo.reference's bit for "
                f"bit ({csec:.0f} s)")
        else:
            i = bad[0]
            diff = (logits[i] - ref[i]).abs().max().item()
            log(f"  NOT EXACT: {len(bad)} of {len(ref)} steps differ from bitgo.reference; "
                f"first at step {i} (max |diff| {diff:g})")
        res.update(exact=ok, steps_checked=len(ref))
    agree = sum(a == b for a, b in zip(toks[len(prompt):], toks_fp32[len(prompt):]))
    log(f"  greedy tokens equal to the float32 model's: {agree} of {args.tokens} (random "
        f"weights; quantized activations change the logits slightly)")
    log(f"  peak memory of this process: {rss_gb():.1f} GB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    bitgo.client.close_default_client()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
