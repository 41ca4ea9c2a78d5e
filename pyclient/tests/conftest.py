"""Shared fixtures: the repository root, Go-generated test vectors, small helpers."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "pyclient"))

VECTORS_DIR = REPO / "build" / "pytest-vectors"

FORMATS = ["i2s", "tl1", "tl2", "int2", "int1", "int8", "bf16", "f32"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _generate_vectors() -> Path:
    """Go's kernels writes the vectors (pyclient/tests/gen). Inside the torch 2 chroot there is
    no Go toolchain: BITGO_TEST_VECTORS, or the vectors a host run left in build/, are used."""
    env_dir = os.environ.get("BITGO_TEST_VECTORS")
    if env_dir:
        return Path(env_dir)
    go = shutil.which("go")
    if go is None:
        if (VECTORS_DIR / "manifest.json").exists():
            return VECTORS_DIR
        pytest.fail("Go test vectors: no `go` on PATH and no vectors in "
                    f"{VECTORS_DIR} (run the tests on the host first, or set "
                    "BITGO_TEST_VECTORS)")
    VECTORS_DIR.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([go, "run", "./pyclient/tests/gen", "-out", str(VECTORS_DIR)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.fail(f"go run ./pyclient/tests/gen failed:\n{res.stderr}")
    return VECTORS_DIR


class Vectors:
    _DT = {"f32": np.float32, "i8": np.int8, "u8": np.uint8, "u16": np.uint16}

    def __init__(self, d: Path):
        self.manifest = json.loads((d / "manifest.json").read_text())
        self.data = (d / "data.bin").read_bytes()
        self.cases = self.manifest["cases"]

    def array(self, a) -> torch.Tensor:
        off, n, dt = a
        v = np.frombuffer(self.data, dtype=self._DT[dt], count=n, offset=off).copy()
        if dt == "u16":
            v = v.astype(np.int32)
        return torch.from_numpy(v)

    def arrays(self, case) -> dict:
        return {k: self.array(v) for k, v in case["arrays"].items()}


@pytest.fixture(scope="session")
def vectors() -> Vectors:
    return Vectors(_generate_vectors())


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor (for bit-exact comparisons that also see -0 and NaN)."""
    if t.dtype == torch.float32:
        return t.contiguous().view(torch.int32)
    return t.contiguous().view(torch.int16)


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    ba, bb = bits(a), bits(b)
    if not torch.equal(ba, bb):
        i = int((ba != bb).reshape(-1).nonzero()[0])
        raise AssertionError(f"{what}: differ at flat index {i}: {a.reshape(-1)[i].item()!r} vs "
                             f"{b.reshape(-1)[i].item()!r}")


def torch_at_least(major: int, minor: int) -> bool:
    v = torch.__version__.split("+")[0].split(".")
    return (int(v[0]), int(v[1])) >= (major, minor)


TL2_CHUNK_OF = {"kernels/2": 12, "kernels/3": 12, "kernels/4": 10, "kernels/5": 10,
                "kernels/6": 10, "kernels/7": 10, "kernels/8": 10, "kernels/9": 10}
"""The most blocks in a chunk of a chunk-major tl2 blob, by layout revision (tl2_panel_of
says which blobs were chunk-major)."""

TL2_PANEL = 32
TL2_PANEL_MIN_M, TL2_PANEL_MIN_K = 2017, 1008
TL2_TWO_PANEL_M = 3809
TL2_PANEL_MIN_K7 = 2544
"""This revision's (kernels/9; tl2's as in kernels/8) tl2 panel rule, stated here
independently of bitgo.reference (kernels/layout.go): a tl2 blob of M >= TL2_PANEL_MIN_M (64
row blocks) and K >= TL2_PANEL_MIN_K (21 blocks) is panel-major: below TL2_TWO_PANEL_M (120
row blocks) in two panels, of ceil(Mrb/2) row blocks and the rest, from it on in panels of
TL2_PANEL row blocks; any other is chunk-major. (kernels/7 laid out panel-major only from
TL2_PANEL_MIN_K7 = 2544 inputs, 53 blocks, on; kernels/6 only from TL2_PANEL_MIN_K7 and
TL2_TWO_PANEL_M on.)"""


def tl2_panel_of(m, k, rev):
    """The row blocks per panel of an m x k tl2 blob as layout revision ``rev`` (kernels/2 on)
    stored it, 0 where it was chunk-major: every tl2 blob before kernels/5; in kernels/5 those
    of K < 4080 or M <= 4064 (the others in panels of 16); in kernels/6 those short of
    TL2_TWO_PANEL_M or TL2_PANEL_MIN_K7 (the others in panels of TL2_PANEL); in kernels/7 to
    kernels/9 those short of TL2_PANEL_MIN_M or of TL2_PANEL_MIN_K7 (kernels/7) or
    TL2_PANEL_MIN_K (kernels/8, kernels/9) (the others in two panels below TL2_TWO_PANEL_M, of
    ceil(Mrb/2) row blocks and the rest, in panels of TL2_PANEL from it on)."""
    mrb = -(-m // 32)
    if rev in ("kernels/7", "kernels/8", "kernels/9"):
        if m < TL2_PANEL_MIN_M or k < (TL2_PANEL_MIN_K7 if rev == "kernels/7" else TL2_PANEL_MIN_K):
            return 0
        return -(-mrb // 2) if m < TL2_TWO_PANEL_M else TL2_PANEL
    if rev == "kernels/6":
        return TL2_PANEL if m >= TL2_TWO_PANEL_M and k >= TL2_PANEL_MIN_K7 else 0
    if rev == "kernels/5":
        return 16 if m > 4064 and k >= 4080 else 0
    assert rev in TL2_CHUNK_OF, f"no tl2 layout of {rev}"
    return 0


def tl2_streams(w):
    """The row-block streams [Mrb, S] of tl2 logical weights [M, K], each packed on its own:
    a one-row-block blob is its stream (in every revision)."""
    from bitgo import reference as R
    m, k = w.shape
    rows = torch.zeros((-(-m // 32) * 32, k), dtype=torch.int8)
    rows[:m] = w
    return torch.stack([R.pack("tl2", rows[r: r + 32]) for r in range(0, rows.shape[0], 32)])


def tl2_chunk_major(s, k, most):
    """tl2 row-block streams [Mrb, S] laid out chunk-major: max(1, ceil(nb/most)) chunks of
    blocks spread evenly, each chunk every row block's piece in turn, the last piece ending
    with the tl1 tail."""
    nb = k // 48
    nc = max(1, -(-nb // most))
    ends = [320 * ((c + 1) * nb // nc) for c in range(nc - 1)] + [s.shape[1]]
    return torch.cat([s[:, 320 * (c * nb // nc): e].reshape(-1) for c, e in enumerate(ends)])


def tl2_panel_major(s, k, g):
    """tl2 row-block streams [Mrb, S] laid out panel-major: panels of g row blocks (the last
    may hold fewer), each its row blocks' block 0 in turn, then block 1, ..., then their tl1
    tails in turn."""
    nb, out = k // 48, []
    for r0 in range(0, s.shape[0], g):
        p = s[r0: r0 + g]
        out += [p[:, : 320 * nb].reshape(p.shape[0], nb, 320).transpose(0, 1).reshape(-1),
                p[:, 320 * nb:].reshape(-1)]
    return torch.cat(out)


def tl2_in_revision(s, m, k, rev):
    """The row-block streams [Mrb, S] of an m x k tl2 blob laid out as layout revision ``rev``
    (kernels/2 on) stored them (tl2_panel_of, TL2_CHUNK_OF)."""
    g = tl2_panel_of(m, k, rev)
    return tl2_panel_major(s, k, g) if g else tl2_chunk_major(s, k, TL2_CHUNK_OF[rev])


def tl2_as_revision(blob, m, k, rev):
    """A tl2 blob of this revision as ``rev`` (kernels/2 on) stored it (tl2_in_revision)."""
    from bitgo import reference as R
    return tl2_in_revision(tl2_streams(R.unpack("tl2", m, k, blob)), m, k, rev)


INT1_PANEL = 32
"""This revision's (kernels/9) int1 panel rule, stated here independently of bitgo.reference
(kernels/int1.go): an int1 blob is always panel-major, its Mrb row blocks planned as n pairs
of panels, n the fewest with 2n panels of INT1_PANEL row blocks holding them all; every panel
but the last holds P row blocks, P the fewest with 2n panels of P holding them all, and the
last the rest (fewer than P where P does not divide Mrb; and where (2n-1)P already holds
them all there are fewer than 2n panels: 961 row blocks, 31 of 31)."""


def int1_panels(m):
    """The row blocks of each panel of an m-row int1 blob, in order (INT1_PANEL)."""
    mrb = -(-m // 32)
    n = 1
    while 2 * n * INT1_PANEL < mrb:
        n += 1
    p = 1
    while 2 * n * p < mrb:
        p += 1
    panels = []
    while sum(panels) < mrb:
        panels.append(min(p, mrb - sum(panels)))
    return panels


def int1_v8(w):
    """The int1 blob of logical weights w [M, K] as layouts kernels/1 to kernels/8 packed it
    (stated here independently of bitgo.reference, from Go's int1DecodeV8): padding rows and
    inputs +1 (bit 0), Kp = roundup(K, 32), row block after row block (4*Kp bytes), units of
    32 bytes holding 32 rows x inputs 8u..8u+7: byte p = 4*r8 + k4 of unit u, bit j (j =
    0..3) row 8j+r8 at input 8u+k4, bit 4+j row 8j+r8 at input 8u+4+k4."""
    m, k = w.shape
    mp, kp = -(-m // 32) * 32, -(-k // 32) * 32
    neg = np.zeros((mp, kp), dtype=np.uint8)
    neg[:m, :k] = (w.numpy() < 0)
    b = neg.reshape(mp // 32, 4, 8, kp // 8, 2, 4)  # rb, j, r8, u, h, k4
    out = np.zeros((mp // 32, kp // 8, 8, 4), dtype=np.uint8)  # rb, u, r8, k4
    for j in range(4):
        for h in range(2):
            out |= b[:, j, :, :, h, :].transpose(0, 2, 1, 3) << (4 * h + j)
    return torch.from_numpy(out.reshape(-1).copy())
