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


def chunked_as_kernels_3(blob, fmt, m, k):
    """A tl2 blob of this revision as kernels/3 stored it: chunks of up to 12 blocks."""
    from bitgo import reference as R
    lay = R.layout(fmt, m, k)
    s = R._streams(blob, lay)
    return torch.cat([s[:, o: o + n].reshape(-1)
                      for o, n in R._pieces(lay, R._TL2_CHUNK_BEFORE)])
