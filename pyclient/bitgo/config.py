"""bitgo's vocabulary in Python: weight formats, activation modes, scale granularities and
the ``QuantConfig`` dataclass. It mirrors Go's ``quantcfg`` package (formats, defaults,
validation rules and error wording) and does no arithmetic.

The exact arithmetic is defined once by Go's ``kernels`` package and reproduced in
``bitgo.reference``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional, Sequence, Union

__all__ = [
    "Format",
    "ActKind",
    "ScaleKind",
    "FormatInfo",
    "QuantConfig",
    "MIN_GROUP",
    "MAX_DIM",
    "DEFAULT_CODEBOOK",
    "format_info",
]

MIN_GROUP = 32
"""Every group size is a positive multiple of this (kernels accumulate whole 32-wide K blocks)."""

MAX_DIM = 1 << 20
"""Bound on every layer dimension (rows and columns)."""

DEFAULT_CODEBOOK = (-2, -1, 0, 1)
"""int2's default code book: offset binary, code c means c-2."""


class _DocEnum(str, enum.Enum):
    """A str Enum whose members carry their own docstring: ``NAME = "value", "doc"``."""

    def __new__(cls, value: str, doc: str = ""):
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.__doc__ = doc
        return obj

    def __str__(self) -> str:  # "i2s", not "Format.I2S"
        return self.value


class Format(_DocEnum):
    """A weight format. The value is the name configs, flags and the wire use.

    Every layout pads M (output rows) up to Mp = a multiple of 32 and stores each block of 32
    rows (a row block) as one byte stream, contiguous but in tl1, tl2 and int1 (whose blobs
    interleave the streams); K (inputs) is padded per format to Kp.
    Padding weights hold 0 (ternary, int8, floats), code 0 (int2) or +1 (int1). Scales and
    biases are separate float32 tensors, never in the blob. Each member's docstring gives its
    byte layout (the pictures in Go's kernels/<format>.go).
    """

    I2S = "i2s", """Ternary {-1,0,1} as 2-bit codes c = w+1 (bitnet.cpp I2_S order).

    Kp = roundup(K, 128); row block = 8*Kp bytes. The blob is
    [Mp/4 row quads][Kp/128 blocks][4 rows][32 B]: byte j of the piece of row 4q+r, block b,
    holds the codes of inputs k, k+32, k+64, k+96 (k = 128b + j) in bits 7-6, 5-4, 3-2, 1-0."""
    TL1 = "tl1", """Ternary weight pairs as 4-bit indices 3*w0 + w1 + 4 (0..8) into a 9-entry table.

    Kp = roundup(K, 4); row block = 8*Kp bytes, [Kp/4 units][32 rows]: byte r of unit u: bits
    3-0 = index of inputs (4u, 4u+1), bits 7-4 = index of (4u+2, 4u+3). The blob is
    chunk-major: ceil(Kp/1024) chunks of units spread evenly, each every row block's piece."""
    TL2 = "tl2", """Ternary weight triples as 5-bit codes |v| + 16*(v < 0), v = 9*w0 + 3*w1 + w2.

    v is in [-13, 13], so codes are 0..13 and 16..29 (16, a negative zero, reads as 0).
    K3 = 48*floor(K/48) inputs in tl2 blocks of 16 triples, the tail [K3, K) as tl1 padded to
    Kp1 = roundup(K-K3, 4); row block = 320*K3/48 + 8*Kp1 bytes: its tl2 blocks, then tl1 units.
    A 320-byte block is five planes: bytes 64j..64j+63 are 32 little-endian uint16 words, word r
    (row r) = codes of triples 3j, 3j+1, 3j+2 in bits 0-4, 5-9, 10-14 and bit j of triple 15's
    code in bit 15. With nb = K3/48 blocks and Mp/32 row blocks, a blob of nb >= 21 (K >= 1008)
    and Mp/32 >= 64 (M > 2016) is panel-major: below 120 row blocks (M <= 3808) two panels, of
    ceil(Mp/64) row blocks and the rest, from 120 on panels of 32 row blocks (the last may hold
    fewer), each holding block 0 of its row blocks in turn, then block 1, ..., then their tl1
    units. Any other is chunk-major: max(1, ceil(nb/10)) chunks of blocks spread evenly, each
    holding every row block's piece in turn; a row block's piece of the last chunk ends with
    its tl1 units."""
    INT2 = "int2", """2-bit codes c (0..3) meaning codebook[c], VNNI4-interleaved.

    Kp = roundup(K, 32); row block = 8*Kp bytes: [Kp/4 units][32 B], byte p = 4*r8 + k4 of unit
    u holds rows r8, 8+r8, 16+r8, 24+r8 (bits 1-0, 3-2, 5-4, 7-6) at input 4u + k4."""
    INT1 = "int1", """Binary ±1 (bit 0 -> +1, bit 1 -> -1), 16 inputs of a row to a word.

    Kp = roundup(K, 32); row block = 4*Kp bytes: its Kp/32 blocks of 128 bytes, block b (inputs
    32b..32b+31) two planes: bytes 64h..64h+63 (h = 0, 1) are 32 little-endian uint16 words,
    word r (row r) bit j = 1 where input 32b+16h+j is -1 (nibble f: the signs of inputs
    32b+16h+4f..+3). The blob is panel-major, in panels of P row blocks (the last may hold
    fewer): with Mrb = Mp/32 row blocks and n = ceil(Mrb/64), P = ceil(Mrb/(2n)) <= 32 and
    ceil(Mrb/P) panels, 2n but at a large Mrb sometimes fewer (6912 rows: 8 panels of 27);
    panel p from byte P*p*4*Kp on, each holding block 0 of its g row blocks in turn (128 bytes
    each), then block 1, ...: row block P*p+i's block b at P*p*4*Kp + 128*(b*g + i) (layout
    kernels/9; before it, row block after row block, VNNI4-interleaved)."""
    INT8 = "int8", """int8 weights in VNNI4 blocks.

    Kp = roundup(K, 32); row block = 32*Kp bytes: [Kp/4 units][32 rows][4 B], dword r of unit u
    holds row r's inputs 4u..4u+3."""
    BF16 = "bf16", """bfloat16 weights (rounded to nearest even), float32 math; the baseline.

    Kp = K; row block = 64*K bytes: [K][32 rows] little-endian bfloat16."""
    F32 = "f32", """float32 weights and math.

    Kp = K; row block = 128*K bytes: [K][32 rows] little-endian float32."""


class ActKind(_DocEnum):
    """How activations are quantized to int8 (absmax, round half to even, clamp to [-128, 127]).

    The config string is the value, with ":G" after "per-group"."""

    PER_TOKEN = "per-token", "One scale 127/max(max|x|, 1e-5) per token (BitNet b1.58's scheme)."
    PER_TENSOR = "per-tensor", "One scale for all tokens of the call."
    PER_GROUP = "per-group", "One scale per token and per group of G inputs ('per-group:G')."
    NONE = "none", "Activations stay float32 (float formats only)."


class ScaleKind(_DocEnum):
    """Granularity of weight scales (float32, stored beside the blob, never in it).

    The config string is the value, with ":G" after "group"."""

    TENSOR = "tensor", "One scale for the layer."
    ROW = "row", "One scale per output row."
    GROUP = "group", "One scale per output row and group of G inputs, row-major ('group:G')."
    NONE = "none", "No scales (float formats)."


@dataclasses.dataclass(frozen=True)
class FormatInfo:
    """What a format stores and which settings it accepts (first listed = default)."""

    format: Format
    bits: float
    ternary: bool
    float: bool
    scales: tuple
    acts: tuple
    max_k: int
    summary: str


_INT_ACTS = (ActKind.PER_TOKEN, ActKind.PER_TENSOR, ActKind.PER_GROUP)
_LUT_ACTS = (ActKind.PER_TOKEN, ActKind.PER_TENSOR)
_TERN_SCALES = (ScaleKind.TENSOR, ScaleKind.ROW)
_INT_SCALES = (ScaleKind.ROW, ScaleKind.TENSOR, ScaleKind.GROUP)

_FORMATS = {
    f.format: f
    for f in [
        FormatInfo(Format.I2S, 2, True, False, _TERN_SCALES, _INT_ACTS, MAX_DIM,
                   "ternary, 2-bit codes (w+1), multiply-add kernel (bitnet.cpp I2_S)"),
        FormatInfo(Format.TL1, 2, True, False, _TERN_SCALES, _LUT_ACTS, MAX_DIM,
                   "ternary, weight pairs as 4-bit indices into a 9-entry table"),
        FormatInfo(Format.TL2, 5 / 3, True, False, _TERN_SCALES, _LUT_ACTS, MAX_DIM,
                   "ternary, weight triples as 5-bit signed codes; K remainder as tl1"),
        FormatInfo(Format.INT2, 2, False, False, _INT_SCALES, _INT_ACTS, 1 << 16,
                   "2-bit codes mapped through a 4-entry int8 code book, VNNI4-interleaved"),
        FormatInfo(Format.INT1, 1, False, False, _INT_SCALES, _INT_ACTS, MAX_DIM,
                   "binary ±1 (bit 0 -> +1, bit 1 -> -1), 16 inputs of a row to a word, looked up four at a time"),
        FormatInfo(Format.INT8, 8, False, False, _INT_SCALES, _INT_ACTS, 1 << 16,
                   "int8 weights, VNNI4 blocks: the int8 roofline reference"),
        FormatInfo(Format.BF16, 16, False, True, (ScaleKind.NONE,), (ActKind.NONE,), MAX_DIM,
                   "bfloat16 weights, float32 math: the unquantized baseline"),
        FormatInfo(Format.F32, 32, False, True, (ScaleKind.NONE,), (ActKind.NONE,), MAX_DIM,
                   "float32 weights and math"),
    ]
}

_FORMAT_NAMES = ", ".join(f.value for f in Format)
_ACT_ALLOWED = '"per-token", "per-tensor", "per-group:G" (G a positive multiple of 32) or "none"'
_SCALE_ALLOWED = '"tensor", "row", "group:G" (G a positive multiple of 32) or "none"'


def format_info(fmt: Union[str, Format]) -> FormatInfo:
    """Return the description of a format; ValueError names the allowed formats."""
    return _FORMATS[parse_format(fmt)]


def parse_format(s: Union[str, Format]) -> Format:
    """Read a format name (case-insensitive, surrounding space ignored)."""
    if isinstance(s, Format):
        return s
    if isinstance(s, str):
        try:
            return Format(s.strip().lower())
        except ValueError:
            pass
    raise ValueError(f"format {s!r}: allowed formats are {_FORMAT_NAMES}")


def _parse_group(field: str, spelled: str, g: str) -> int:
    try:
        n = int(g, 10)
    except ValueError:
        raise ValueError(f"{field} {spelled!r}: group size {g!r} is not an integer") from None
    if n < MIN_GROUP or n % MIN_GROUP or n > MAX_DIM:
        raise ValueError(
            f"{field} {spelled!r}: group size {n} is not a multiple of {MIN_GROUP} in "
            f"[{MIN_GROUP}, {MAX_DIM}]")
    return n


def _parse_mode(field: str, s, kind, grouped, prefix: str, allowed: str) -> tuple:
    """Read a mode spelled as one of kind's values or "<prefix>G" into (kind member or None
    for "format default", group or 0)."""
    if s is None:
        return None, 0
    if isinstance(s, kind):
        s = s.value
    if not isinstance(s, str):
        raise ValueError(f"{field} {s!r}: want a string; allowed: {allowed}")
    t = s.strip().lower()
    if t == "":
        return None, 0
    if t == grouped.value:
        raise ValueError(f"{field} {s!r}: needs a group size: '{prefix}G'; allowed: {allowed}")
    if t.startswith(prefix):
        try:
            return grouped, _parse_group(field, s, t[len(prefix):])
        except ValueError as e:
            raise ValueError(f"{e}; allowed: {allowed}") from None
    if t in {k.value for k in kind}:
        return kind(t), 0
    raise ValueError(f"{field} {s!r}: allowed: {allowed}")


def parse_act(s: Union[str, ActKind, None]) -> tuple:
    """Read an activation mode into (ActKind or None for "format default", group or 0)."""
    return _parse_mode("act", s, ActKind, ActKind.PER_GROUP, "per-group:", _ACT_ALLOWED)


def parse_scale(s: Union[str, ScaleKind, None]) -> tuple:
    """Read a scale granularity into (ScaleKind or None for "format default", group or 0)."""
    return _parse_mode("scale", s, ScaleKind, ScaleKind.GROUP, "group:", _SCALE_ALLOWED)


def _spell(kind, group: int) -> str:
    return f"{kind.value}:{group}" if group else kind.value


def _kind_list(kinds) -> str:
    return ", ".join(k.value + (":G" if k in (ActKind.PER_GROUP, ScaleKind.GROUP) else "")
                     for k in kinds)


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """How a layer (or a model) is quantized: Go's ``quantcfg.Config`` and the
    ``quant_method: "bitgo"`` schema of a config.json's quantization_config.

    Fields left as None take the format's defaults. ``__post_init__`` validates every field
    and stores canonical values: ``format`` a :class:`Format`, ``act`` and ``scale`` canonical
    strings ("per-token", "per-group:128", "row", "group:64", ...), ``codebook`` a 4-tuple of
    ints for int2 (None otherwise) and ``modules_to_not_convert`` a tuple of name fragments.
    A ValueError names each bad field and its allowed values.

    Example: ``QuantConfig(format="int2", scale="group:128", codebook=(-3, -1, 1, 3))``.
    """

    format: Union[str, Format] = Format.I2S
    act: Optional[Union[str, ActKind]] = None
    scale: Optional[Union[str, ScaleKind]] = None
    codebook: Optional[Sequence[int]] = None
    modules_to_not_convert: Sequence[str] = ()

    def __post_init__(self) -> None:
        fmt = parse_format(self.format)  # an unknown format is reported alone, as in Go
        fi = _FORMATS[fmt]
        errs = []
        act_kind = scale_kind = None
        act_group = scale_group = 0
        try:
            act_kind, act_group = parse_act(self.act)
            if act_kind is None:
                act_kind = fi.acts[0]
        except ValueError as e:
            errs.append(str(e))
        try:
            scale_kind, scale_group = parse_scale(self.scale)
            if scale_kind is None:
                scale_kind = fi.scales[0]
        except ValueError as e:
            errs.append(str(e))
        if act_kind is not None and act_kind not in fi.acts:
            errs.append(f"act {_spell(act_kind, act_group)!r} with format {fmt.value}: "
                        f"allowed: {_kind_list(fi.acts)}")
        if scale_kind is not None and scale_kind not in fi.scales:
            errs.append(f"scale {_spell(scale_kind, scale_group)!r} with format {fmt.value}: "
                        f"allowed: {_kind_list(fi.scales)}")
        if (act_kind is ActKind.PER_GROUP and scale_kind is ScaleKind.GROUP
                and act_group % scale_group and scale_group % act_group):
            errs.append(f"act {_spell(act_kind, act_group)!r} and scale "
                        f"{_spell(scale_kind, scale_group)!r}: one group size must be a "
                        f"multiple of the other")
        if fmt is Format.I2S and act_kind is ActKind.PER_GROUP and act_group % 128:
            errs.append(f"act {_spell(act_kind, act_group)!r} with format i2s: the group must "
                        f"be a multiple of 128 (i2s packs K in blocks of 128)")
        cb = None
        if self.codebook is not None:
            if fmt is not Format.INT2:
                errs.append(f"codebook given for format {fmt.value}: only int2 uses a code book")
            else:
                try:
                    cb = _check_codebook(self.codebook)
                except ValueError as e:
                    errs.append(str(e))
        elif fmt is Format.INT2:
            cb = DEFAULT_CODEBOOK
        skips = self.modules_to_not_convert
        if isinstance(skips, str) or not isinstance(skips, (list, tuple)):
            errs.append(f"modules_to_not_convert {skips!r}: want a list of module-name fragments")
            skips = ()
        else:
            for i, m in enumerate(skips):
                if not isinstance(m, str) or not m.strip():
                    errs.append(f"modules_to_not_convert[{i}] = {m!r}: want a non-empty string")
        if errs:
            raise ValueError("QuantConfig: " + "; ".join(errs))
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "act", _spell(act_kind, act_group))
        object.__setattr__(self, "scale", _spell(scale_kind, scale_group))
        object.__setattr__(self, "codebook", cb)
        object.__setattr__(self, "modules_to_not_convert", tuple(skips))

    # Parsed views of the canonical strings.
    @property
    def act_kind(self) -> ActKind:
        return ActKind(self.act.split(":")[0])

    @property
    def act_group(self) -> int:
        """G for per-group activations, else 0."""
        return int(self.act.split(":")[1]) if ":" in self.act else 0

    @property
    def scale_kind(self) -> ScaleKind:
        return ScaleKind(self.scale.split(":")[0])

    @property
    def scale_group(self) -> int:
        """G for group scales, else 0."""
        return int(self.scale.split(":")[1]) if ":" in self.scale else 0

    @property
    def info(self) -> FormatInfo:
        return _FORMATS[self.format]

    @property
    def is_float(self) -> bool:
        return self.info.float

    @property
    def is_ternary(self) -> bool:
        return self.info.ternary

    def num_scales(self, out_features: int, in_features: int) -> int:
        """How many weight scales a layer of this shape stores (1, M, M*ceil(K/G) or 0)."""
        k = self.scale_kind
        if k is ScaleKind.TENSOR:
            return 1
        if k is ScaleKind.ROW:
            return out_features
        if k is ScaleKind.GROUP:
            g = self.scale_group
            return out_features * ((in_features + g - 1) // g)
        return 0

    def seg_len(self) -> int:
        """The accumulation segment length along K (a group size), or 0 for one segment."""
        if self.act_kind is ActKind.PER_GROUP and self.scale_kind is ScaleKind.GROUP:
            return min(self.act_group, self.scale_group)
        if self.act_kind is ActKind.PER_GROUP:
            return self.act_group
        if self.scale_kind is ScaleKind.GROUP:
            return self.scale_group
        return 0

    def check_shape(self, out_features: int, in_features: int, name: str = "") -> None:
        """Refuse a shape the format cannot serve (Go's LayerSpec.Validate), naming the layer."""
        where = f"layer {name}: " if name else ""
        errs = []
        for what, v in (("out_features (M)", out_features), ("in_features (K)", in_features)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > MAX_DIM:
                errs.append(f"{what} = {v!r}: must be an int in [1, {MAX_DIM}]")
        if not errs and in_features > self.info.max_k:
            errs.append(f"in_features (K) = {in_features}: format {self.format.value} takes "
                        f"K <= {self.info.max_k} (larger K could overflow its int32 "
                        f"accumulators); split the layer along K")
        if errs:
            raise ValueError(where + "; ".join(errs))

    def skips(self, module: str) -> bool:
        """Whether the module with this dotted name stays unquantized (a fragment occurs in it)."""
        return any(m in module for m in self.modules_to_not_convert)

    def to_dict(self) -> dict:
        """The quantization_config form (quant_method "bitgo"), defaults filled in."""
        d: dict = {"quant_method": "bitgo", "format": self.format.value, "act": self.act,
                   "scale": self.scale}
        if self.codebook is not None:
            d["codebook"] = list(self.codebook)
        if self.modules_to_not_convert:
            d["modules_to_not_convert"] = list(self.modules_to_not_convert)
        return d

    _KEYS = ("quant_method", "format", "act", "scale", "codebook", "modules_to_not_convert")

    @classmethod
    def from_dict(cls, qc: dict) -> "QuantConfig":
        """Read a ``quant_method: "bitgo"`` quantization_config. Unknown keys are errors (they
        are usually typos); format is required."""
        if not isinstance(qc, dict):
            raise ValueError(f"quantization_config: want an object, got {type(qc).__name__}")
        method = str(qc.get("quant_method", "bitgo")).lower()
        if method != "bitgo":
            raise ValueError(f"quantization_config.quant_method {qc.get('quant_method')!r}: "
                             f"QuantConfig reads \"bitgo\" configs")
        unknown = sorted(k for k in qc if k not in cls._KEYS)
        if unknown:
            raise ValueError(f"quantization_config (bitgo): unknown key(s) {', '.join(unknown)}; "
                             f"allowed keys: {', '.join(cls._KEYS)}")
        if not qc.get("format"):
            raise ValueError(f"quantization_config (bitgo): format is missing; allowed formats "
                             f"are {_FORMAT_NAMES}")
        return cls(format=qc["format"], act=qc.get("act"), scale=qc.get("scale"),
                   codebook=qc.get("codebook"),
                   modules_to_not_convert=qc.get("modules_to_not_convert") or ())

    def spec(self, out_features: int, in_features: int) -> str:
        """The compact layer description the ``bitgo::linear`` op carries:
        "format|act|scale|M|K|codebook"."""
        cb = ",".join(str(c) for c in self.codebook) if self.codebook else ""
        return f"{self.format.value}|{self.act}|{self.scale}|{out_features}|{in_features}|{cb}"

    @classmethod
    def from_spec(cls, spec: str) -> tuple:
        """Inverse of :meth:`spec`: (QuantConfig, M, K)."""
        parts = spec.split("|")
        if len(parts) != 6:
            raise ValueError(f"layer spec {spec!r}: want 'format|act|scale|M|K|codebook'")
        f, a, s, m, k, cb = parts
        codebook = tuple(int(c) for c in cb.split(",")) if cb else None
        return cls(format=f, act=a, scale=s, codebook=codebook), int(m), int(k)


def _check_codebook(cb: Any) -> tuple:
    if isinstance(cb, (str, bytes)) or not hasattr(cb, "__len__"):
        raise ValueError(f"codebook {cb!r}: want 4 integers in [-128, 127]")
    if len(cb) != 4:
        raise ValueError(f"codebook: want 4 levels, got {len(cb)}")
    out = []
    for i, x in enumerate(cb):
        if isinstance(x, bool) or not isinstance(x, int) and not (
                hasattr(x, "__index__") and not isinstance(x, float)):
            raise ValueError(f"codebook[{i}] = {x!r}: levels are integers in [-128, 127]")
        x = int(x)
        if x < -128 or x > 127:
            raise ValueError(f"codebook[{i}] = {x}: levels are int8, in [-128, 127]")
        out.append(x)
    for i in range(4):
        for j in range(i + 1, 4):
            if out[i] == out[j]:
                raise ValueError(f"codebook {out}: levels must be distinct (codes {i} and {j} "
                                 f"are both {out[i]})")
    return tuple(out)
