"""The arithmetic of every bitgo format in plain PyTorch: the test oracle.

This module reproduces, bit for bit, what Go's ``kernels`` package defines (kernels/doc.go):

* ``pack`` / ``unpack``: every packed layout, byte-identical to Go's ``kernels.Pack``
  (padding rows and inputs included), and its inverse with the same validity checks;
* ``quantize_acts``: int8 activation quantization (per-token, per-tensor, per-group:G);
* the exact integer accumulation per segment and the float32 epilogue in the defined order
  (``p_j = (float32(acc_j) * ws) / xs``, summed left to right, then the bias; no FMA);
* the float formats' sequential-k sum;
* the weight recipes (``ternarize``, ``ternarize_rows``, ``quantize_weights``), identical to
  Go's ``kernels.Ternarize`` / ``TernarizeRows`` / ``QuantizeWeights``;
* ``linear(module, x)``: what a :class:`bitgo.BitLinear` must return for ``x``.

Integer sums are computed as float32 or float64 matrix products of integer values, which are
exact whenever every partial sum stays below 2**24 (float32) or 2**53 (float64); the bound is
checked per call. Everything else is float32 element-wise arithmetic, which PyTorch evaluates
with IEEE rounding and no contraction in eager mode.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

import numpy as np
import torch

from .config import (MAX_DIM, ActKind, Format, QuantConfig, ScaleKind, format_info,
                     parse_format)

__all__ = [
    "ROW_BLOCK", "TL2_BLOCK", "TL2_CHUNK", "TL2_PANEL", "TL2_PANEL_MIN_BLOCKS",
    "TL2_PANEL_MIN_ROW_BLOCKS", "TL2_TWO_PANEL_ROW_BLOCKS", "INT1_PANEL",
    "LAYOUT", "Layout",
    "layout", "pack", "unpack", "relayout", "quantize_acts",
    "bf16_bits", "bf16_round", "from_bf16_bits", "ternarize", "ternarize_rows",
    "quantize_weights", "quantize_for", "linear_logical", "linear_packed", "linear",
    "dequantize",
]

ROW_BLOCK = 32
"""Output rows stored together: the unit of thread partitioning."""

TL2_BLOCK = 48
"""Inputs (16 triples) in one tl2 block."""

TL2_CHUNK = 10
"""The most tl2 blocks in a chunk of a chunk-major tl2 blob (every tl2 blob but the
panel-major ones, :data:`TL2_PANEL_MIN_BLOCKS`): the blob stores chunk after chunk, each with
every row block's piece side by side, the last piece ending with the tl1 tail
(kernels/tl2.go)."""

TL2_PANEL = 32
"""Row blocks in a panel of a panel-major tl2 blob of at least
:data:`TL2_TWO_PANEL_ROW_BLOCKS` row blocks: the blob stores panel after panel (the last may
hold fewer), each with every row block's block 0 side by side, then block 1, and so on, then
every row block's tl1 tail (kernels/tl2.go). (16 in layout kernels/5.)"""

TL2_PANEL_MIN_BLOCKS = 21
TL2_PANEL_MIN_ROW_BLOCKS = 64
TL2_TWO_PANEL_ROW_BLOCKS = 120
"""A tl2 blob is panel-major when it has at least TL2_PANEL_MIN_BLOCKS tl2 blocks (K >= 1008)
and TL2_PANEL_MIN_ROW_BLOCKS row blocks (M > 2016), and chunk-major otherwise. Below
TL2_TWO_PANEL_ROW_BLOCKS row blocks (M <= 3808) it is two panels, of ceil(row blocks/2) and
the rest; from it on, panels of :data:`TL2_PANEL`. (In layout kernels/7, panel-major only from
53 blocks, K >= 2544; in kernels/6 only from 53 blocks and TL2_TWO_PANEL_ROW_BLOCKS row
blocks on.) Go's ``kernels.TL2PanelMinBlocks``, ``TL2PanelMinRowBlocks`` and
``TL2TwoPanelRowBlocks``."""

INT1_PANEL = 32
"""The most row blocks in a panel of an int1 blob. An int1 blob is always panel-major (layout
kernels/9 on): the blob stores panel after panel (the last may hold fewer row blocks), each
with every row block's 128-byte block 0 side by side, then block 1, and so on
(kernels/int1.go). With mrb row blocks and n = ceil(mrb/64), its panels hold P =
ceil(mrb/(2n)) row blocks (P <= INT1_PANEL), the last possibly fewer: ceil(mrb/P) panels, 2n
but at a large mrb sometimes fewer (:func:`_int1_panel_rows`), so that two workers' whole
panels are even shares (6912 rows, 216 row blocks: 8 panels of 27). Go's
``kernels.Int1Panel``."""

_LAYOUT_HISTORY = (
    ("kernels/1", ()),
    ("kernels/2", (Format.TL2,)),  # the tl2 block: five planes of 5-bit codes
    ("kernels/3", (Format.TL1,)),  # the tl1 blob chunk-major, like tl2's
    ("kernels/4", (Format.TL2,)),  # tl2's chunks at most 10 blocks instead of 12
    ("kernels/5", (Format.TL2,)),  # tl2 of K >= 4080 and M > 4064 panel-major, panels of 16
    ("kernels/6", (Format.TL2,)),  # tl2 panels of 32, panel-major from K >= 2544 and M > 3808
    ("kernels/7", (Format.TL2,)),  # tl2 panel-major from M > 2016 too, two panels up to M = 3808
    ("kernels/8", (Format.TL2,)),  # tl2 panel-major from K >= 1008 (21 blocks) instead of 2544
    ("kernels/9", (Format.INT1,)),  # int1 in blocks of 32 inputs, 16 bits of a row to a word,
                                    # panel-major (2*ceil(row blocks/64) panels of at
                                    # most INT1_PANEL row blocks)
)
"""The layout revisions, oldest first, each with the formats whose layout it changed (Go's
``kernels.layoutHistory``)."""

LAYOUT = _LAYOUT_HISTORY[-1][0]
"""The revision of these layouts (Go's ``kernels.LayoutRevision``, the pack file's
``layout``): packed uploads name it, so that bitd refuses a blob whose revision lays its
format out otherwise, and BitLinear states record it."""

TL1_CHUNK = 256
"""The most tl1 units (4 inputs each) in a chunk: a tl1 blob stores chunk after chunk, each
with every row block's piece side by side (kernels/tl1.go)."""

_EPS = torch.tensor(1e-5, dtype=torch.float32)  # BitNet's clamp(min=1e-5), as a float32
_EPS_NP = np.float32(1e-5)
_I127 = torch.tensor(127.0, dtype=torch.float32)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


@dataclasses.dataclass(frozen=True)
class Layout:
    """Padded geometry and byte sizes of a layer's packed blob (Go's ``kernels.Layout``)."""

    format: Format
    m: int
    k: int
    mp: int
    kp: int
    k3: int = 0   # tl2: inputs [0, k3) are tl2 blocks
    kp1: int = 0  # tl2: the tl1 tail [k3, k) padded to kp1
    row_block_bytes: int = 0
    # the most row blocks of a panel of a panel-major blob: int1 (ceil(row blocks/(2n)), n =
    # ceil(row blocks/64), at most INT1_PANEL: _int1_panel_rows), or tl2 (TL2_PANEL, or ceil(row
    # blocks/2) in a two-panel one: _tl2_panel_rows; 16 in a kernels/5 blob and 32 in a
    # kernels/6 one that relayout reads, as in a kernels/7 one); 0: chunk-major tl2, or any
    # other format
    panel_rows: int = 0
    # tl2, chunk-major: the most blocks of a chunk of an older revision's blob that relayout
    # reads (12 in kernels/2 and kernels/3, 10 in kernels/4 to kernels/7); 0: this
    # revision's, TL2_CHUNK
    tl2_chunk: int = 0

    @property
    def row_blocks(self) -> int:
        return self.mp // ROW_BLOCK

    @property
    def nbytes(self) -> int:
        return self.row_blocks * self.row_block_bytes

    @property
    def paneled(self) -> bool:
        """Whether the blob is panel-major, in panels of up to :attr:`panel_rows` row blocks
        (Go's ``Layout.Paneled``): in this revision tl2 of at least
        :data:`TL2_PANEL_MIN_BLOCKS` blocks and :data:`TL2_PANEL_MIN_ROW_BLOCKS` row blocks, in
        two panels (of ceil(row blocks/2) and the rest) below
        :data:`TL2_TWO_PANEL_ROW_BLOCKS` row blocks and in panels of :data:`TL2_PANEL` from it
        on; every other tl2 blob is chunk-major (:data:`TL2_CHUNK`). (An int1 blob is
        panel-major too, always, in panels of at most :data:`INT1_PANEL` row blocks
        (:func:`_int1_panel_rows`): ``paneled`` is tl2's.)"""
        return self.format is Format.TL2 and self.panel_rows > 0


def _tl2_panel_rows(nb: int, mrb: int) -> int:
    """The row blocks per panel of a tl2 blob of nb blocks and mrb row blocks in this
    revision's layout (Go's ``kernels.tl2PanelRows``): 0 where it is chunk-major (nb <
    :data:`TL2_PANEL_MIN_BLOCKS` or mrb < :data:`TL2_PANEL_MIN_ROW_BLOCKS`); ceil(mrb/2), two
    panels, below :data:`TL2_TWO_PANEL_ROW_BLOCKS` row blocks; :data:`TL2_PANEL` from it on."""
    if nb < TL2_PANEL_MIN_BLOCKS or mrb < TL2_PANEL_MIN_ROW_BLOCKS:
        return 0
    if mrb < TL2_TWO_PANEL_ROW_BLOCKS:
        return (mrb + 1) // 2
    return TL2_PANEL


def _int1_panel_rows(mrb: int) -> int:
    """The row blocks per panel of an int1 blob of mrb row blocks (Go's
    ``kernels.int1PanelRows``): 2n panels, n = ceil(mrb/64), of P = ceil(mrb/(2n)) row blocks
    (at most :data:`INT1_PANEL`), the last possibly fewer; ceil(mrb/P) panels in all, which
    at a large mrb may be fewer than 2n (2000 row blocks: 63 of 32), and one where mrb = 1."""
    np_ = 2 * ((mrb + 2 * INT1_PANEL - 1) // (2 * INT1_PANEL))
    return (mrb + np_ - 1) // np_


def _tl2_before(rev: str, l: Layout) -> Optional[Layout]:
    """How layout revision ``rev``, one before this one, laid out a tl2 blob of ``l``'s shape
    (the row blocks' streams are the same in all of them; Go's ``kernels.tl2Before``); None
    for a revision whose tl2 blocks were encoded otherwise (kernels/1) or that is not one
    before this one:

    * kernels/2 and kernels/3: chunk-major, chunks of up to 12 blocks;
    * kernels/4: chunk-major, chunks of up to 10;
    * kernels/5: panel-major in panels of 16 row blocks where it has at least 85 blocks and
      128 row blocks (K >= 4080, M > 4064), chunk-major in chunks of up to 10 otherwise;
    * kernels/6: panel-major in panels of 32 row blocks where it has at least 53 blocks and
      120 row blocks (K >= 2544, M > 3808), chunk-major in chunks of up to 10 otherwise;
    * kernels/7: panel-major where it has at least 53 blocks and 64 row blocks (K >= 2544,
      M > 2016), in two panels (ceil(row blocks/2) and the rest) below 120 row blocks and in
      panels of 32 from 120 on, chunk-major in chunks of up to 10 otherwise."""
    if rev in ("kernels/2", "kernels/3"):
        return dataclasses.replace(l, panel_rows=0, tl2_chunk=12)
    if rev == "kernels/4":
        return dataclasses.replace(l, panel_rows=0, tl2_chunk=10)
    if rev == "kernels/5":
        if l.k3 // TL2_BLOCK >= 85 and l.row_blocks >= 128:
            return dataclasses.replace(l, panel_rows=16, tl2_chunk=0)
        return dataclasses.replace(l, panel_rows=0, tl2_chunk=10)
    if rev == "kernels/6":
        if l.k3 // TL2_BLOCK >= 53 and l.row_blocks >= 120:
            return dataclasses.replace(l, panel_rows=32, tl2_chunk=0)
        return dataclasses.replace(l, panel_rows=0, tl2_chunk=10)
    if rev == "kernels/7":
        nb, mrb = l.k3 // TL2_BLOCK, l.row_blocks
        if nb < 53 or mrb < 64:
            return dataclasses.replace(l, panel_rows=0, tl2_chunk=10)
        panel = (mrb + 1) // 2 if mrb < 120 else 32
        return dataclasses.replace(l, panel_rows=panel, tl2_chunk=0)
    return None


def layout(fmt: Union[str, Format], m: int, k: int) -> Layout:
    """The layout of an M x K layer in a format; ValueError names a dimension out of range."""
    fmt = parse_format(fmt)
    fi = format_info(fmt)
    if not isinstance(m, int) or m < 1 or m > MAX_DIM:
        raise ValueError(f"out_features (M) = {m!r}: must be in [1, {MAX_DIM}]")
    if not isinstance(k, int) or k < 1 or k > fi.max_k:
        raise ValueError(f"in_features (K) = {k!r}: format {fmt.value} takes K in [1, {fi.max_k}]")
    mp = _round_up(m, ROW_BLOCK)
    if fmt is Format.I2S:
        kp = _round_up(k, 128)
        return Layout(fmt, m, k, mp, kp, row_block_bytes=8 * kp)
    if fmt is Format.TL1:
        kp = _round_up(k, 4)
        return Layout(fmt, m, k, mp, kp, row_block_bytes=8 * kp)
    if fmt is Format.TL2:
        k3 = k // TL2_BLOCK * TL2_BLOCK
        kp1 = _round_up(k - k3, 4)
        nb = k3 // TL2_BLOCK
        return Layout(fmt, m, k, mp, k3 + kp1, k3, kp1, 320 * nb + 8 * kp1,
                      _tl2_panel_rows(nb, mp // ROW_BLOCK))
    if fmt is Format.INT2:
        kp = _round_up(k, 32)
        return Layout(fmt, m, k, mp, kp, row_block_bytes=8 * kp)
    if fmt is Format.INT1:
        kp = _round_up(k, 32)
        return Layout(fmt, m, k, mp, kp, row_block_bytes=4 * kp,
                      panel_rows=_int1_panel_rows(mp // ROW_BLOCK))
    if fmt is Format.INT8:
        kp = _round_up(k, 32)
        return Layout(fmt, m, k, mp, kp, row_block_bytes=32 * kp)
    if fmt is Format.BF16:
        return Layout(fmt, m, k, mp, k, row_block_bytes=64 * k)
    return Layout(fmt, m, k, mp, k, row_block_bytes=128 * k)


# ---------------------------------------------------------------------------------------------
# bfloat16 rounding (Go's kernels.BF16 / FromBF16)


def bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 bits (int32 tensor of values 0..65535), rounding to nearest even;
    NaN becomes the quiet NaN 0x7FC0 with its sign kept (never infinity)."""
    b = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    q = ((b >> 16) | 0x7FC0) & 0xFFFF
    return torch.where(nan, q, r).to(torch.int32)


def from_bf16_bits(h: torch.Tensor) -> torch.Tensor:
    """bfloat16 bits -> float32, exactly."""
    v = (h.to(torch.int64) & 0xFFFF) << 16
    v = torch.where(v >= 1 << 31, v - (1 << 32), v)  # to a signed int32 bit pattern
    return v.to(torch.int32).view(torch.float32)


def bf16_round(x: torch.Tensor) -> torch.Tensor:
    """float32 -> torch.bfloat16 with Go's rounding (nearest even, NaN -> quiet NaN)."""
    h = bf16_bits(x)
    h = torch.where(h >= 1 << 15, h - (1 << 16), h).to(torch.int16)
    return h.view(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# Logical weights and their checks


def _check_logical(fmt: Format, w: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """Validate logical weights [m, k]; return them as int8 or int32 (integer formats) or
    float32."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{fmt.value} weights: want a torch.Tensor, got {type(w).__name__}")
    if tuple(w.shape) != (m, k):
        raise ValueError(f"{fmt.value} weights have shape {tuple(w.shape)}, want ({m}, {k})")
    w = w.detach().cpu()
    if format_info(fmt).float:
        if not w.is_floating_point():
            raise ValueError(f"{fmt.value} weights: want a float tensor, got {w.dtype}")
        w = w.to(torch.float32)
        _check_finite(w, lambda i: f"{fmt.value} weight at row {i // k}, input {i % k}")
        return w
    if w.is_floating_point():
        if not torch.equal(w, w.round()) or not bool(torch.isfinite(w).all()):
            raise ValueError(f"{fmt.value} weights must be integer-valued")
    if w.dtype != torch.int8:  # int8 input is checked as it is (a quarter of the memory)
        w = w.to(torch.int32)
    if format_info(fmt).ternary:
        lo, hi, what = -1, 1, "ternary weights are -1, 0 or 1"
        mn, mx = torch.aminmax(w) if w.numel() else (w.new_zeros(()), w.new_zeros(()))
        # one pass without temporaries when the values are in range (the usual case)
        bad = (w < lo) | (w > hi) if int(mn) < lo or int(mx) > hi else torch.zeros(1, dtype=torch.bool)
    elif fmt is Format.INT2:
        what = "int2 weights are code indices 0..3"
        bad = (w < 0) | (w > 3)
    elif fmt is Format.INT1:
        what = "int1 weights are +1 or -1"
        bad = (w != 1) & (w != -1)
    else:
        what = "int8 weights are in [-128, 127]"
        bad = (w < -128) | (w > 127) if w.dtype != torch.int8 else torch.zeros(1, dtype=torch.bool)
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        raise ValueError(f"{fmt.value} weight at row {i // k}, input {i % k} is "
                         f"{int(w.reshape(-1)[i])}: {what}")
    return w


def _check_finite(x: torch.Tensor, where) -> None:
    if x.is_floating_point() and x.numel() > 4096 and bool(torch.isfinite(x.sum())):
        return  # a NaN or an infinity would make the sum non-finite (a finite sum proves none)
    fin = torch.isfinite(x)
    if not bool(fin.all()):
        i = int((~fin).reshape(-1).nonzero()[0])
        raise ValueError(f"{where(i)} is {float(x.reshape(-1)[i])}: not finite")


def _pad(w: torch.Tensor, l: Layout, value: int) -> torch.Tensor:
    """Rows [0, M) of logical weights in an [Mp, Kp] tensor whose padding holds ``value``."""
    if (l.mp, l.kp) == tuple(w.shape):
        return w.contiguous()
    out = torch.full((l.mp, l.kp), value, dtype=w.dtype)
    out[: l.m, : l.k] = w
    return out


def _bytes_le(v: torch.Tensor, n: int) -> torch.Tensor:
    """Little-endian bytes of non-negative integers: [..., n] uint8."""
    v = v.to(torch.int64)
    return torch.stack([(v >> (8 * i)) & 0xFF for i in range(n)], dim=-1).to(torch.uint8)


def _from_le(b: torch.Tensor, n: int) -> torch.Tensor:
    b = b.to(torch.int64)
    v = b[..., 0]
    for i in range(1, n):
        v = v | (b[..., i] << (8 * i))
    return v


# ---------------------------------------------------------------------------------------------
# Encoders: padded logical [Mp, Kp] (int32) -> [row blocks, row block bytes] (uint8)


def _enc_i2s(w: torch.Tensor, l: Layout) -> torch.Tensor:
    c = (w + 1).to(torch.uint8).view(l.mp // 4, 4, l.kp // 128, 4, 32)  # quad, row, block, s, j
    v = (c[:, :, :, 0] << 6) | (c[:, :, :, 1] << 4) | (c[:, :, :, 2] << 2) | c[:, :, :, 3]
    return v.permute(0, 2, 1, 3).reshape(l.row_blocks, l.row_block_bytes)


def _tl1_units(w: torch.Tensor, rows_blocks: int) -> torch.Tensor:
    kp = w.shape[1]
    p = w.reshape(rows_blocks, ROW_BLOCK, kp // 4, 2, 2)  # rb, r, unit, pair h, element
    idx = 3 * p[..., 0] + p[..., 1] + 4
    v = idx[..., 0] | (idx[..., 1] << 4)  # rb, r, unit
    return v.permute(0, 2, 1).reshape(rows_blocks, 8 * kp)


def _enc_tl1(w: torch.Tensor, l: Layout) -> torch.Tensor:
    return _chunk_major(_tl1_units(w, l.row_blocks), l)


_PLANES = torch.arange(5, dtype=torch.int64)  # tl2: plane j's bit 15 is bit j of triple 15


def _tl2_codes(w: torch.Tensor, rb: int, nb: int) -> torch.Tensor:
    """The 5-bit codes |v| + 16*(v < 0), v = 9*w0 + 3*w1 + w2: [rb, r, block, triple]."""
    t = w.reshape(rb, ROW_BLOCK, nb, 16, 3).to(torch.int64)
    v = 9 * t[..., 0] + 3 * t[..., 1] + t[..., 2]
    return v.abs() + 16 * (v < 0).to(torch.int64)


def _enc_tl2(w: torch.Tensor, l: Layout) -> torch.Tensor:
    rb, nb = l.row_blocks, l.k3 // TL2_BLOCK
    parts = []
    if nb:
        c = _tl2_codes(w[:, : l.k3], rb, nb)  # rb, r, block, triple
        c3 = c[..., :15].reshape(rb, ROW_BLOCK, nb, 5, 3)  # triples 3j, 3j+1, 3j+2 of plane j
        hi = (c[..., 15:] >> _PLANES) & 1  # rb, r, block, plane: bit j of triple 15's code
        words = c3[..., 0] | (c3[..., 1] << 5) | (c3[..., 2] << 10) | (hi << 15)
        words = words.permute(0, 2, 3, 1)  # rb, block, plane, r
        parts.append(_bytes_le(words, 2).reshape(rb, nb * 320).to(torch.int64))
    if l.kp1:
        parts.append(_tl1_units(w[:, l.k3: l.k3 + l.kp1], rb).to(torch.int64))
    return _tl2_order(torch.cat(parts, dim=1), l)


def _tl2_order(s: torch.Tensor, l: Layout) -> torch.Tensor:
    """tl2 row-block streams [rb, row_block_bytes] -> the blob (flat): panel-major (panels of
    up to ``l.panel_rows`` row blocks) where ``l.paneled``, chunk-major (chunks of up to
    ``l.tl2_chunk`` or :data:`TL2_CHUNK` blocks) otherwise."""
    return _panel_major(s, l) if l.paneled else _chunk_major(s, l)


def _tl2_streams(b: torch.Tensor, l: Layout) -> torch.Tensor:
    """The inverse of :func:`_tl2_order`: the tl2 blob (flat) -> row-block streams."""
    return _panel_streams(b, l) if l.paneled else _streams(b, l)


def _panel_blocks(l: Layout) -> Tuple[int, int]:
    """(blocks, bytes of a row block's block) of a panel-major blob's row-block stream (Go's
    ``Layout.blockBytes``): tl2, nb = k3/48 blocks of 320 bytes and then the tl1 tail; int1,
    kp/32 blocks of 128 bytes and no tail."""
    if l.format is Format.INT1:
        return l.kp // 32, 128
    return l.k3 // TL2_BLOCK, 320


def _panel_runs(l: Layout):
    """(first row block, row blocks per panel, panels) of a panel-major blob's runs of equal
    panels: the full panels of ``l.panel_rows``, then the short last one."""
    rb, g = l.row_blocks, l.panel_rows
    full = rb // g * g
    return [r for r in ((0, g, rb // g), (full, rb - full, 1)) if r[1] * r[2]]


def _panel_major(s: torch.Tensor, l: Layout) -> torch.Tensor:
    """Row-block streams [rb, row_block_bytes] of a panel-major blob (tl2, int1) -> the
    blob's panel-major order (flat): in a panel of g row blocks, local row block i's block b
    at bb*(b*g + i) (bb: 320 for tl2, 128 for int1; :func:`_panel_blocks`), then tl2's tails,
    local row block i's at 320*nb*g + 8*kp1*i."""
    (nb, bb), out = _panel_blocks(l), []
    for r0, g, n in _panel_runs(l):
        p = s[r0: r0 + g * n].reshape(n, g, l.row_block_bytes)
        blocks = p[..., : bb * nb].reshape(n, g, nb, bb).transpose(1, 2).reshape(n, -1)
        out.append(torch.cat([blocks, p[..., bb * nb:].reshape(n, -1)], dim=1).reshape(-1))
    return torch.cat(out)


def _panel_streams(b: torch.Tensor, l: Layout) -> torch.Tensor:
    """A panel-major blob's bytes (flat) -> row-block streams [rb, row_block_bytes]."""
    (nb, bb), out = _panel_blocks(l), []
    for r0, g, n in _panel_runs(l):
        p = b[r0 * l.row_block_bytes: (r0 + g * n) * l.row_block_bytes].reshape(n, -1)
        blocks = p[:, : bb * nb * g].reshape(n, nb, g, bb).transpose(1, 2).reshape(n, g, -1)
        tails = p[:, bb * nb * g:].reshape(n, g, -1)
        out.append(torch.cat([blocks, tails], dim=2).reshape(g * n, l.row_block_bytes))
    return torch.cat(out)


def _pieces(l: Layout):
    """(first stream byte, piece bytes) of each chunk of a chunk-major blob (tl1, and tl2
    but the panel-major shapes). tl2: nc = max(1, ceil(nb/most)) chunks, most =
    :data:`TL2_CHUNK` (``l.tl2_chunk`` in an older revision's blob, :func:`_tl2_before`),
    chunk c holding blocks c*nb//nc .. (c+1)*nb//nc - 1 (320 bytes each), the last also the
    tl1 tail; tl1: ceil(nu/256) chunks of the nu = kp/4 units (32 bytes each), spread the
    same way."""
    tl2 = l.format is Format.TL2
    if tl2:
        ns, most, size = l.k3 // TL2_BLOCK, l.tl2_chunk or TL2_CHUNK, 320
    else:
        ns, most, size = l.kp // 4, TL1_CHUNK, 32
    nc = max(1, -(-ns // most))
    out = []
    for c in range(nc):
        s0, s1 = c * ns // nc, (c + 1) * ns // nc
        out.append((size * s0, size * (s1 - s0) + (8 * l.kp1 if tl2 and c == nc - 1 else 0)))
    return out


def _chunk_major(s: torch.Tensor, l: Layout) -> torch.Tensor:
    """Row-block streams [rb, row_block_bytes] -> the blob's chunk-major order (flat)."""
    return torch.cat([s[:, o: o + n].reshape(-1) for o, n in _pieces(l)])


def _streams(b: torch.Tensor, l: Layout) -> torch.Tensor:
    """The blob's chunk-major bytes (flat) -> row-block streams [rb, row_block_bytes]."""
    rb, parts, at = l.row_blocks, [], 0
    for _, n in _pieces(l):
        parts.append(b[at: at + rb * n].reshape(rb, n))
        at += rb * n
    return torch.cat(parts, dim=1)


def _enc_int2(w: torch.Tensor, l: Layout) -> torch.Tensor:
    c = w.view(l.row_blocks, 4, 8, l.kp // 4, 4)  # rb, j, r8, unit, k4
    v = c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)  # rb, r8, unit, k4
    return v.permute(0, 2, 1, 3).reshape(l.row_blocks, l.row_block_bytes)


def _enc_int1(w: torch.Tensor, l: Layout) -> torch.Tensor:
    """int1 (kernels/9, kernels/int1.go): row block rb's block b (inputs 32b..32b+31) is two
    planes h of 32 little-endian uint16 words, word r's bit j = 1 where row r's input
    32b+16h+j is -1; so byte e of the word holds inputs 32b+16h+8e..+7 in bits 0-7. The
    row blocks' streams (their blocks in turn) are laid out panel-major, in panels of
    ``l.panel_rows`` row blocks (:func:`_int1_panel_rows`)."""
    s = (w < 0).to(torch.uint8).view(l.row_blocks, ROW_BLOCK, l.kp // 32, 2, 2, 8)
    v = s[..., 0]  # rb, r, block, h, byte e: bit i = input 32b + 16h + 8e + i
    for i in range(1, 8):
        v = v | (s[..., i] << i)
    streams = v.permute(0, 2, 3, 1, 4).reshape(l.row_blocks, l.row_block_bytes)  # rb,b,h,r,e
    return _panel_major(streams, l)


def _enc_int8(w: torch.Tensor, l: Layout) -> torch.Tensor:
    v = w.view(l.row_blocks, ROW_BLOCK, l.kp // 4, 4).permute(0, 2, 1, 3)
    return (v & 0xFF).reshape(l.row_blocks, l.row_block_bytes)


def _enc_float(w: torch.Tensor, l: Layout) -> torch.Tensor:
    if l.format is Format.BF16:
        words, n = bf16_bits(w), 2
    else:
        words, n = w.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF, 4
    v = words.view(l.row_blocks, ROW_BLOCK, l.k).permute(0, 2, 1)  # rb, k, r
    return _bytes_le(v, n).reshape(l.row_blocks, l.row_block_bytes)


_ENCODERS = {
    Format.I2S: _enc_i2s, Format.TL1: _enc_tl1, Format.TL2: _enc_tl2,
    Format.INT2: _enc_int2, Format.INT1: _enc_int1, Format.INT8: _enc_int8,
}


def pack(fmt: Union[str, Format], weights: torch.Tensor) -> torch.Tensor:
    """Pack logical weights [M, K] into the format's layout: a uint8 tensor of
    ``layout(fmt, M, K).nbytes`` bytes, byte-identical to Go's ``kernels.Pack``.

    Logical weights are: ternary formats -1/0/1; int2 code indices 0..3 (the level is the
    layer's codebook[code]); int1 +1/-1; int8 the values; bf16/f32 float values (bf16 rounds
    to nearest even)."""
    fmt = parse_format(fmt)
    if weights.dim() != 2:
        raise ValueError(f"{fmt.value} weights: want a 2-D [out_features, in_features] tensor, "
                         f"got shape {tuple(weights.shape)}")
    m, k = weights.shape
    l = layout(fmt, int(m), int(k))
    w = _check_logical(fmt, weights, l.m, l.k)
    if format_info(fmt).float:
        wp = torch.zeros((l.mp, l.k), dtype=torch.float32)
        wp[: l.m] = w
        out = _enc_float(wp, l)
    else:
        if fmt is not Format.I2S:  # i2s encodes int8 directly; the others shift wider words
            w = w.to(torch.int32)
        out = _ENCODERS[fmt](_pad(w, l, 1 if fmt is Format.INT1 else 0), l)
    return out.to(torch.uint8).reshape(-1).contiguous()


# ---------------------------------------------------------------------------------------------
# Decoders: blob -> padded logical [Mp, Kp] (int32) or [Mp, K] float32


def _bad(fmt: Format, what: str, mask: torch.Tensor, where, span: int = 1) -> None:
    """Refuses the blob if ``mask`` has a true element: the first in the mask's order (lay it
    out in Go's loop order to name the element Go names), as ``where(index) -> (row, input)``;
    a code covering ``span`` inputs is named as inputs ``input``..``input + span - 1``."""
    if bool(mask.any()):
        i = tuple(int(v) for v in mask.nonzero()[0])
        row, inp = where(i)
        at = f"input {inp}" if span == 1 else f"inputs {inp}-{inp + span - 1}"
        raise ValueError(f"invalid {fmt.value} blob: {what} at row {row}, {at}")


def _dec_i2s(b: torch.Tensor, l: Layout) -> torch.Tensor:
    v = b.view(l.mp // 4, l.kp // 128, 4, 32).permute(0, 2, 1, 3)  # quad, row, block, j
    c = torch.stack([(v >> (6 - 2 * s)) & 3 for s in range(4)], dim=3)  # q, r, b, s, j
    _bad(l.format, "code 3 (codes are w+1 in {0,1,2})", c == 3,
         lambda i: (4 * i[0] + i[1], 128 * i[2] + 32 * i[3] + i[4]))
    return c.reshape(l.mp, l.kp).to(torch.int8) - 1


def _tl1_decode(b: torch.Tensor, rows_blocks: int, kp: int, k0: int, fmt: Format) -> torch.Tensor:
    v = b.reshape(rows_blocks, kp // 4, ROW_BLOCK).permute(0, 2, 1)  # rb, r, unit
    idx = torch.stack([v & 15, v >> 4], dim=3)  # rb, r, unit, h
    _bad(fmt, "tl1 index > 8 (indices are 0..8)", idx > 8,
         lambda i: (ROW_BLOCK * i[0] + i[1], k0 + 4 * i[2] + 2 * i[3]))
    pair = torch.stack([idx // 3 - 1, idx % 3 - 1], dim=4)  # rb, r, unit, h, e
    return pair.reshape(rows_blocks * ROW_BLOCK, kp)


def _dec_tl1(b: torch.Tensor, l: Layout) -> torch.Tensor:
    return _tl1_decode(_streams(b.reshape(-1), l), l.row_blocks, l.kp, 0, l.format)


def _dec_tl2(b: torch.Tensor, l: Layout) -> torch.Tensor:
    rb, nb = l.row_blocks, l.k3 // TL2_BLOCK
    b = _tl2_streams(b.reshape(-1), l)
    parts = []
    if nb:
        words = _from_le(b[:, : 320 * nb].reshape(rb, nb, 5, ROW_BLOCK, 2), 2)  # rb, blk, j, r
        c3 = torch.stack([(words >> (5 * i)) & 31 for i in range(3)], dim=3)  # rb, blk, j, i, r
        c15 = (((words >> 15) & 1) << _PLANES.view(1, 1, 5, 1)).sum(dim=2)  # rb, block, r
        c = torch.cat([c3.reshape(rb, nb, 15, ROW_BLOCK), c15.unsqueeze(2)], dim=2)
        # c: rb, block, triple, r (Go's loop order, so the first bad code is the one Go names)
        _bad(l.format, "tl2 code > 13 in its low 4 bits (codes are 0..13 and 16..29)",
             (c & 15) > 13, lambda i: (ROW_BLOCK * i[0] + i[3], TL2_BLOCK * i[1] + 3 * i[2]),
             span=3)
        v = torch.where(c >= 16, -(c & 15), c).permute(0, 3, 1, 2) + 13  # rb, r, block, triple
        d0 = v // 9
        rem = v - 9 * d0
        t = torch.stack([d0 - 1, rem // 3 - 1, rem % 3 - 1], dim=4)  # rb, r, block, triple, 3
        parts.append(t.reshape(l.mp, l.k3))
    if l.kp1:
        parts.append(_tl1_decode(b[:, 320 * nb:], rb, l.kp1, l.k3, l.format).to(torch.int64))
    return torch.cat(parts, dim=1)


def _dec_int2(b: torch.Tensor, l: Layout) -> torch.Tensor:
    v = b.view(l.row_blocks, l.kp // 4, 8, 4).permute(0, 2, 1, 3)  # rb, r8, unit, k4
    c = torch.stack([(v >> (2 * j)) & 3 for j in range(4)], dim=1)  # rb, j, r8, unit, k4
    return c.reshape(l.mp, l.kp)


def _dec_int1(b: torch.Tensor, l: Layout) -> torch.Tensor:
    """The inverse of :func:`_enc_int1`: the uint8 blob -> padded logical [Mp, Kp] int8."""
    s = _panel_streams(b.reshape(-1), l)
    v = s.view(l.row_blocks, l.kp // 32, 2, ROW_BLOCK, 2).permute(0, 3, 1, 2, 4)  # rb,r,b,h,e
    bits = torch.stack([(v >> i) & 1 for i in range(8)], dim=5).to(torch.int8)  # ..., e, bit
    return (1 - 2 * bits).reshape(l.mp, l.kp)


def _dec_int1_v8(b: torch.Tensor, l: Layout) -> torch.Tensor:
    """An int1 blob of layout kernels/1 to kernels/8 (Go's ``kernels.int1DecodeV8``) -> padded
    logical [Mp, Kp]: row block after row block (4*Kp bytes each), units of 32 bytes holding
    32 rows x inputs 8u..8u+7, byte p = 4*r8 + k4 of unit u: bit j (j = 0..3) row 8j+r8 at
    input 8u+k4, bit 4+j row 8j+r8 at input 8u+4+k4 (VNNI4-interleaved)."""
    v = b.view(l.row_blocks, l.kp // 8, 8, 4).permute(0, 2, 1, 3)  # rb, r8, unit, k4
    bits = torch.stack([torch.stack([(v >> (4 * h + j)) & 1 for h in range(2)], dim=3)
                        for j in range(4)], dim=1).to(torch.int8)  # rb, j, r8, unit, h, k4
    return (1 - 2 * bits).reshape(l.mp, l.kp)


def _dec_int8(b: torch.Tensor, l: Layout) -> torch.Tensor:
    v = b.view(l.row_blocks, l.kp // 4, ROW_BLOCK, 4).permute(0, 2, 1, 3)
    v = torch.where(v >= 128, v - 256, v)
    return v.reshape(l.mp, l.kp)


def _dec_float(b: torch.Tensor, l: Layout) -> torch.Tensor:
    n = 2 if l.format is Format.BF16 else 4
    words = _from_le(b.view(l.row_blocks, l.k, ROW_BLOCK, n), n).permute(0, 2, 1)
    words = words.reshape(l.mp, l.k)
    if n == 2:
        return from_bf16_bits(words)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words)
    return words.to(torch.int32).view(torch.float32)


def _wide(dec):
    """A decoder that works on int64 bytes (the uint8 blob widened first)."""
    return lambda b, l: dec(b.to(torch.int64), l)


# i2s and int1 decode the uint8 blob directly (i2s is the format large models use; wide int64
# temporaries cost 8x the memory).
_DECODERS = {
    Format.I2S: _dec_i2s, Format.TL1: _wide(_dec_tl1), Format.TL2: _wide(_dec_tl2),
    Format.INT2: _wide(_dec_int2), Format.INT1: _dec_int1, Format.INT8: _wide(_dec_int8),
}


def _check_blob(blob: torch.Tensor, l: Layout) -> torch.Tensor:
    if not isinstance(blob, torch.Tensor) or blob.dtype != torch.uint8:
        raise ValueError(f"{l.format.value} blob: want a uint8 tensor")
    if blob.numel() != l.nbytes:
        raise ValueError(f"{l.format.value} {l.m}x{l.k} blob has {blob.numel()} bytes, "
                         f"want {l.nbytes}")
    return blob.detach().cpu().reshape(-1)


def unpack(fmt: Union[str, Format], m: int, k: int, blob: torch.Tensor) -> torch.Tensor:
    """Logical weights [M, K] of a packed blob (the inverse of :func:`pack`): int8 for the
    integer formats, float32 for bf16/f32. A code outside the format's set is a ValueError
    naming the row and the input."""
    l = layout(fmt, m, k)
    b = _check_blob(blob, l)
    if format_info(l.format).float:
        return _dec_float(b.to(torch.int64), l)[:m].contiguous()
    w = _DECODERS[l.format](b, l)
    return w[:m, :k].to(torch.int8).contiguous()


def relayout(fmt: Union[str, Format], m: int, k: int, blob: torch.Tensor,
             from_layout: str) -> torch.Tensor:
    """A blob packed in layout revision ``from_layout``, in this revision's layout
    (:data:`LAYOUT`): the blob itself where the format's layout has not changed since; a tl2
    blob of kernels/2 to kernels/7, read as that revision laid out its shape
    (:func:`_tl2_before`: chunk-major in chunks of up to 12 blocks, or 10, or panel-major in
    panels of 16 row blocks in kernels/5, of 32 in kernels/6, of 32 or in two in kernels/7),
    laid out as this revision lays out its shape (its row-block streams are unchanged):
    panel-major where :attr:`Layout.paneled`, in panels of :data:`TL2_PANEL` or in two, else
    chunk-major with chunks of up to :data:`TL2_CHUNK` (a kernels/4 to kernels/7 blob of a
    shape chunk-major still, or a kernels/6 or kernels/7 blob of a shape in the panels it has
    now, comes back byte for byte), checked by decoding it; an int1 blob of kernels/1 to
    kernels/8 (row block after row block, VNNI4-interleaved: :func:`_dec_int1_v8`) encoded
    again in this revision's layout, its padding bits as they were (every bit pattern is an
    int1 blob: only the size is checked). Any other change is a ValueError naming the
    revisions."""
    l = layout(fmt, m, k)
    b = _check_blob(blob, l)
    revs = [r for r, _ in _LAYOUT_HISTORY]
    if from_layout not in revs:
        raise ValueError(f"blob layout {from_layout!r} is not one this bitgo knows (it packs "
                         f"{LAYOUT}, and reads from {revs[0]} on the formats unchanged since)")
    changes = [r for r, fs in _LAYOUT_HISTORY[revs.index(from_layout) + 1:] if l.format in fs]
    if not changes:
        return b
    if l.format is Format.INT1:  # changed in kernels/9 only: from_layout is one of 1..8
        return _enc_int1(_dec_int1_v8(b, l), l).reshape(-1).contiguous()
    before = _tl2_before(from_layout, l) if l.format is Format.TL2 else None
    if before is not None:  # the same streams, laid out as from_layout stored them
        out = _tl2_order(_tl2_streams(b, before), l)
        unpack(l.format, m, k, out)  # a code outside the format's set: not such a blob
        return out
    raise ValueError(f"{l.format.value} blobs changed layout in {changes[0]}, after "
                     f"{from_layout}: pack the weights again (this bitgo packs {LAYOUT})")


def _unpack_padded(l: Layout, blob: torch.Tensor) -> torch.Tensor:
    """The whole padded [Mp, Kp] logical weights (for checking padding)."""
    b = _check_blob(blob, l)
    return _DECODERS[l.format](b, l)


# ---------------------------------------------------------------------------------------------
# Activations


@dataclasses.dataclass
class Acts:
    """One call's quantized activations: ``q`` [N, K] int32 in [-128, 127], ``xs`` the
    float32 scales (one; one per token; or [N, ceil(K/G)] per group)."""

    q: torch.Tensor
    xs: torch.Tensor
    kind: ActKind
    group: int


def _act_scale(amax: torch.Tensor) -> torch.Tensor:
    """xs = 127 / max(amax, 1e-5), float32."""
    return _I127 / torch.maximum(amax, _EPS)


def _quantize_run(x: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """clamp(roundHalfEven(x*xs), -128, 127) with x*xs a float32 product."""
    return torch.clamp(torch.round(x * xs), -128, 127).to(torch.int32)


def quantize_acts(cfg: QuantConfig, x: torch.Tensor) -> Acts:
    """Quantize x ([N, K] float32) per the config's act mode (Go's ``kernels.QuantizeActs``).
    Non-finite values are a ValueError naming the token and the input."""
    if x.dtype != torch.float32 or x.dim() != 2:
        raise ValueError(f"quantize_acts: want a [N, K] float32 tensor, got {x.dtype} "
                         f"{tuple(x.shape)}")
    n, k = x.shape
    _check_finite(x, lambda i: f"activation of token {i // k}, input {i % k}")
    kind = cfg.act_kind
    if kind is ActKind.PER_TOKEN:
        xs = _act_scale(x.abs().amax(dim=1))
        return Acts(_quantize_run(x, xs[:, None]), xs, kind, 0)
    if kind is ActKind.PER_TENSOR:
        xs = _act_scale(x.abs().max()).reshape(1)
        return Acts(_quantize_run(x, xs), xs, kind, 0)
    if kind is ActKind.PER_GROUP:
        g = cfg.act_group
        ng = (k + g - 1) // g
        xp = torch.zeros((n, ng * g), dtype=torch.float32)
        xp[:, :k] = x
        xp = xp.view(n, ng, g)
        xs = _act_scale(xp.abs().amax(dim=2))  # zero padding never raises a max of |x|
        q = _quantize_run(xp, xs[:, :, None]).reshape(n, ng * g)[:, :k]
        return Acts(q.contiguous(), xs, kind, g)
    raise ValueError(f"act mode {cfg.act!r} cannot quantize activations for format "
                     f"{cfg.format.value}")


# ---------------------------------------------------------------------------------------------
# The matrix product


def _levels(cfg: QuantConfig, w: torch.Tensor) -> torch.Tensor:
    """Integer weights wq[m][k] (int32) of logical weights: int2 codes through the codebook."""
    w = w.to(torch.int32)
    if cfg.format is Format.INT2:
        return torch.tensor(cfg.codebook, dtype=torch.int32)[w.to(torch.int64)]
    return w


def _int_matmul(xq: torch.Tensor, wq: torch.Tensor, max_w: int) -> torch.Tensor:
    """Exact integer sums xq @ wq^T as float32 [N, M] (each value rounded from the exact sum,
    as Go's float32(int32) does)."""
    k = xq.shape[1]
    bound = 128 * max(max_w, 1) * max(k, 1)
    if bound < (1 << 24):
        return xq.to(torch.float32) @ wq.to(torch.float32).t()
    acc = xq.to(torch.float64) @ wq.to(torch.float64).t()  # exact: bound < 2**53
    return acc.to(torch.float32)


def _ws_column(cfg: QuantConfig, scales: torch.Tensor, m: int, k: int, j: int, seg: int):
    """The weight scale of segment j for every row: a scalar or an [M] float32 tensor."""
    kind = cfg.scale_kind
    if kind is ScaleKind.TENSOR:
        return scales[0]
    if kind is ScaleKind.ROW:
        return scales
    g = cfg.scale_group
    ng = (k + g - 1) // g
    return scales.view(m, ng)[:, j * seg // g]


def _xs_column(a: Acts, k0: int):
    """The activation scale of the segment starting at k0 for every token: [N, 1] or scalar."""
    if a.kind is ActKind.PER_TENSOR:
        return a.xs[0]
    if a.kind is ActKind.PER_TOKEN:
        return a.xs[:, None]
    return a.xs[:, k0 // a.group][:, None]


def linear_logical(x: torch.Tensor, weights: torch.Tensor, scales: Optional[torch.Tensor],
                   bias: Optional[torch.Tensor], cfg: QuantConfig) -> torch.Tensor:
    """y for x ([N, K] float32) with logical weights [M, K] (see :func:`pack`), float32
    [N, M], by the definition in Go's kernels/doc.go."""
    m, k = weights.shape
    n = x.shape[0]
    if bias is not None:
        bias = bias.to(torch.float32)
    if cfg.is_float:
        _check_finite(x, lambda i: f"activation of token {i // k}, input {i % k}")
        w = weights.to(torch.float32)
        if cfg.format is Format.BF16:
            w = from_bf16_bits(bf16_bits(w))
        wt = w.t().contiguous()
        acc = torch.zeros((n, m), dtype=torch.float32)  # +0
        for kk in range(k):  # the sequential-k sum, each product rounded to float32
            acc = acc + x[:, kk: kk + 1] * wt[kk: kk + 1, :]
        if bias is not None:
            acc = acc + bias
        return acc
    a = quantize_acts(cfg, x)
    wq = _levels(cfg, weights)
    max_w = int(wq.abs().max()) if wq.numel() else 1
    scales = scales.to(torch.float32)
    seg = cfg.seg_len() or k
    y = None
    for j in range((k + seg - 1) // seg):
        k0, k1 = j * seg, min((j + 1) * seg, k)
        acc = _int_matmul(a.q[:, k0:k1], wq[:, k0:k1], max_w)
        p = (acc * _ws_column(cfg, scales, m, k, j, seg)) / _xs_column(a, k0)
        y = p if y is None else y + p
    if bias is not None:
        y = y + bias
    return y


def _to_dtype(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float32:
        return y
    if dtype == torch.bfloat16:
        return bf16_round(y)
    return y.to(dtype)  # float16: round to nearest even


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_input(x: torch.Tensor, k: int, where: str, name: str = "input",
                in_name: str = "in_features") -> None:
    """The checks every entry into bitd makes of an input x for a layer with k inputs: a
    float32/bfloat16/float16 CPU tensor, contiguous, with k as its last dimension. A TypeError
    (dtype) or ValueError naming ``where``, the input and the problem."""
    if x.dtype not in _DTYPES:
        raise TypeError(f"{where}: {name} dtype {x.dtype}: allowed float32, bfloat16, float16")
    if not x.is_cpu:
        raise ValueError(f"{where}: {name} is on device {x.device}; bitgo runs on CPU tensors "
                         f"(bitd owns the compute device): move it with .cpu()")
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"{where}: {name} has shape {tuple(x.shape)}: the last dimension must "
                         f"be {in_name} = {k}")
    if not x.is_contiguous():
        raise ValueError(f"{where}: {name} of shape {tuple(x.shape)} is not contiguous "
                         f"(strides {tuple(x.stride())}); call .contiguous() first")


def linear_packed(x: torch.Tensor, packed: torch.Tensor, scales: Optional[torch.Tensor],
                  bias: Optional[torch.Tensor], cfg: QuantConfig, m: int, k: int) -> torch.Tensor:
    """y for x of shape [..., K] (float32, bfloat16 or float16) from a packed blob: shape
    [..., M] in x's dtype. bf16/fp16 inputs are widened exactly; outputs are rounded from the
    float32 result to nearest even."""
    if x.dtype not in _DTYPES:
        raise ValueError(f"input dtype {x.dtype}: allowed float32, bfloat16, float16")
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"input has shape {tuple(x.shape)}: last dimension must be "
                         f"in_features = {k}")
    lead = tuple(x.shape[:-1])
    x2 = x.detach().reshape(-1, k).to(torch.float32)
    if x2.shape[0] == 0:
        return torch.empty(lead + (m,), dtype=x.dtype)
    w = unpack(cfg.format, m, k, packed)
    y = linear_logical(x2, w, scales, bias, cfg)
    return _to_dtype(y, x.dtype).reshape(lead + (m,))


def linear(module, x: torch.Tensor) -> torch.Tensor:
    """What ``module`` (a :class:`bitgo.BitLinear`) must return for x."""
    return linear_packed(x, module.packed, module.scales, module.bias, module.config,
                         module.out_features, module.in_features)


def dequantize(cfg: QuantConfig, weights: torch.Tensor, scales: Optional[torch.Tensor]):
    """float32 [M, K] weights level * scale (for inspection: the layer never computes with
    them)."""
    m, k = weights.shape
    if cfg.is_float:
        w = weights.to(torch.float32)
        return from_bf16_bits(bf16_bits(w)) if cfg.format is Format.BF16 else w
    wq = _levels(cfg, weights).to(torch.float32)
    kind = cfg.scale_kind
    s = scales.to(torch.float32)
    if kind is ScaleKind.TENSOR:
        return wq * s[0]
    if kind is ScaleKind.ROW:
        return wq * s[:, None]
    g = cfg.scale_group
    ng = (k + g - 1) // g
    cols = torch.arange(k) // g
    return wq * s.view(m, ng)[:, cols]


# ---------------------------------------------------------------------------------------------
# Weight recipes (Go's kernels.Ternarize, TernarizeRows, QuantizeWeights)


def _exact_abs_sum(units: np.ndarray):
    """Per-unit sum of |v| when it is provably exact in float64 in any order, else None.

    If every |v| is a multiple of u (the ulp of the smallest non-zero |v|) and the total is
    below 2**53 * u, every partial sum is a multiple of u below 2**53 * u, hence a float64
    with no rounding: the sequential sum (Go's) equals numpy's pairwise one. Weights with a
    few distinct magnitudes (ternary times a scale, low-bit checkpoints) pass this test;
    general float weights do not and take the sequential path."""
    a = torch.from_numpy(units).abs()  # torch: multi-threaded passes
    sums = a.sum(dim=-1, dtype=torch.float64)
    smax = float(sums.max()) if sums.numel() else 0.0
    if smax == 0.0:
        return sums.numpy()
    if not np.isfinite(smax):
        return None
    mn = float(a.masked_fill_(a == 0, float("inf")).min())  # the smallest non-zero |v|
    _, e = np.frexp(np.float32(mn))  # mn = m * 2**e, m in [0.5, 1): its ulp is 2**(e-24)
    ulp = np.ldexp(1.0, max(int(e) - 24, -149))
    if smax * (1 + 1e-6) < np.ldexp(ulp, 53):
        return sums.numpy()
    return None


def _seq_abs_sum(units: np.ndarray) -> np.ndarray:
    """Sum of |v| along the last axis in float64, sequentially left to right (the order Go's
    loop uses; numpy's accumulate is sequential, unlike its pairwise sum). Works through the
    columns in chunks, carrying the running sum into each chunk's first element, so the
    float64 temporaries stay small."""
    u = units.reshape(-1, units.shape[-1]) if units.ndim != 2 else units
    rows, n = u.shape
    if n == 0:
        return np.zeros(units.shape[:-1])
    if units.dtype == np.float32:
        exact = _exact_abs_sum(u)
        if exact is not None:
            return exact.reshape(units.shape[:-1])
    width = max(1, min(n, (1 << 18) // max(rows, 1)))
    buf = np.empty((rows, width), dtype=np.float64)
    carry = np.zeros(rows, dtype=np.float64)
    for s in range(0, n, width):
        c = u[:, s: s + width]
        b = buf[:, : c.shape[1]]
        np.abs(c, out=b)
        b[:, 0] += carry  # carry + |v_s|: the next step of the sequential sum
        np.add.accumulate(b, axis=1, out=b)
        carry = b[:, -1].copy()
    return carry.reshape(units.shape[:-1])


def _mean_scale(units: np.ndarray, counts) -> torch.Tensor:
    """s = max(float32(sum|v| / n), 1e-5) per unit."""
    s = (_seq_abs_sum(units) / np.asarray(counts, dtype=np.float64)).astype(np.float32)
    return torch.from_numpy(np.maximum(s, _EPS_NP).reshape(-1).copy())


def _finite_float32(w: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or not w.is_floating_point():
        raise ValueError(f"{what}: want a float tensor")
    w = w.detach().cpu().to(torch.float32).contiguous()
    _check_finite(w.reshape(-1), lambda i: f"{what} {i}")
    return w


def _round_clamp(v: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """clamp(roundHalfEven(v), lo, hi) as int8; v is a temporary (rounded in place)."""
    return v.round_().clamp_(lo, hi).to(torch.int8)


def ternarize(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """BitNet b1.58's absmean recipe over the whole tensor: s = mean|W| (summed in float64
    left to right, rounded to float32, floored at 1e-5), W_t = clamp(roundHalfEven(W/s), -1, 1)
    in float32. Returns (W_t int8 of w's shape, s as a 1-element float32 tensor)."""
    w = _finite_float32(w, "weight")
    s = _mean_scale(w.reshape(1, -1).numpy(), [max(w.numel(), 1)])
    return _round_clamp(w / s[0], -1, 1), s


def ternarize_rows(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`ternarize` applied to each row of [M, K] separately: (W_t, [M] scales)."""
    w = _finite_float32(w, "weight")
    if w.dim() != 2:
        raise ValueError(f"ternarize_rows: want [M, K] weights, got {tuple(w.shape)}")
    s = _mean_scale(w.numpy(), [w.shape[1]] * w.shape[0])
    return _round_clamp(w / s[:, None], -1, 1), s


def _units(cfg: QuantConfig, w: torch.Tensor):
    """Split [M, K] weights into scale units: (units [U, L] zero-padded, counts [U], and a
    function broadcasting [U] scales back to [M, K])."""
    m, k = w.shape
    kind = cfg.scale_kind
    if kind is ScaleKind.TENSOR:
        return w.reshape(1, -1), [m * k], lambda s: s[0]
    if kind is ScaleKind.ROW:
        return w, [k] * m, lambda s: s[:, None]
    if kind is ScaleKind.GROUP:
        g = cfg.scale_group
        ng = (k + g - 1) // g
        wp = torch.zeros((m, ng * g), dtype=torch.float32)
        wp[:, :k] = w
        counts = [min(g, k - j * g) for j in range(ng)] * m
        cols = torch.arange(k) // g
        return wp.view(m * ng, g), counts, lambda s: s.view(m, ng)[:, cols]
    raise ValueError(f"scale {cfg.scale!r} cannot quantize {cfg.format.value} weights")


def weight_scales(cfg: QuantConfig, w: torch.Tensor) -> torch.Tensor:
    """The scales the config's recipe gives float weights [M, K] (float32,
    ``cfg.num_scales(M, K)`` values):

    ternary formats: s = mean|W| per unit (tensor or row); int8: max|W|/127; int2:
    max|W|/max|level|; int1: mean|W|; every scale floored at 1e-5."""
    w = _finite_float32(w, "weight")
    units, counts, _ = _units(cfg, w)
    fmt = cfg.format
    if cfg.is_ternary or fmt is Format.INT1:
        return _mean_scale(units.numpy(), counts)
    amax = units.abs().amax(dim=1)  # zero padding never raises a max of |w|
    if fmt is Format.INT8:
        div = torch.tensor(127.0, dtype=torch.float32)
    elif fmt is Format.INT2:
        div = torch.tensor(float(max(abs(c) for c in cfg.codebook)), dtype=torch.float32)
    else:
        raise ValueError(f"format {fmt.value} has no weight scales")
    return torch.maximum(amax / div, _EPS)


def quantize_with_scales(cfg: QuantConfig, w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Logical weights of float weights [M, K] given their scales (the second half of every
    recipe): ternary clamp(round(W/s), -1, 1); int8 clamp(round(W/s), -128, 127); int2 the
    code whose level is nearest W/s (ties: the lower code); int1 +1 for W >= 0, else -1."""
    w = _finite_float32(w, "weight")
    _, _, spread = _units(cfg, w)
    s = spread(scales.to(torch.float32))
    fmt = cfg.format
    if cfg.is_ternary:
        return _round_clamp(w / s, -1, 1)
    if fmt is Format.INT8:
        return _round_clamp(w / s, -128, 127)
    if fmt is Format.INT1:
        return torch.where(w >= 0, torch.tensor(1, dtype=torch.int8),
                           torch.tensor(-1, dtype=torch.int8))
    if fmt is Format.INT2:
        t = w / s
        cb = [torch.tensor(float(c), dtype=torch.float32) for c in cfg.codebook]
        best = torch.zeros(w.shape, dtype=torch.int8)
        dbest = (t - cb[0]).abs()
        for c in range(1, 4):
            d = (t - cb[c]).abs()
            better = d < dbest
            best = torch.where(better, torch.tensor(c, dtype=torch.int8), best)
            dbest = torch.where(better, d, dbest)
        return best
    raise ValueError(f"format {fmt.value} is not quantized")


def quantize_weights(cfg: QuantConfig, w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Go's ``kernels.QuantizeWeights`` (int2, int1, int8) and ``Ternarize`` /
    ``TernarizeRows`` (ternary formats): float weights [M, K] -> (logical weights int8 [M, K],
    float32 scales)."""
    w = _finite_float32(w, "weight")  # checked once here, then cheap below
    s = weight_scales(cfg, w)
    return quantize_with_scales(cfg, w, s), s


def quantize_for(cfg: QuantConfig, w: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Logical weights and scales of float weights [M, K] for any format: the recipes above
    for quantized formats; the float32 weights themselves (no scales) for bf16/f32."""
    if cfg.is_float:
        return _finite_float32(w, "weight"), None
    return quantize_weights(cfg, w)
