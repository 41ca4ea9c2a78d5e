"""bitgo.reference against Go's kernels, byte for byte and bit for bit.

The vectors come from pyclient/tests/gen (Go): for every format and setting, ragged shapes,
random and edge-case activations (zeros, exact rounding ties, values under the 1e-5 floor),
float32 and bfloat16 inputs; and the weight recipes on wide-range and tie-heavy weights.
"""

import pytest
import torch

from bitgo import reference as R
from bitgo.config import QuantConfig
from conftest import (INT1_PANEL, TL2_PANEL, assert_bits_equal, int1_panels, int1_v8,
                      tl2_panel_of)


def _cfg(case) -> QuantConfig:
    return QuantConfig(format=case["format"], act=case.get("act"), scale=case["scale"],
                       codebook=case.get("codebook"))


def _linear_cases(vectors):
    return [c for c in vectors.cases if c["kind"] == "linear"]


def test_vectors_cover_every_format_and_setting(vectors):
    lin = _linear_cases(vectors)
    assert {c["format"] for c in lin} == {"i2s", "tl1", "tl2", "int2", "int1", "int8", "bf16",
                                          "f32"}
    assert {c["act"] for c in lin} >= {"per-token", "per-tensor", "per-group:32",
                                       "per-group:128", "none"}
    assert {c["scale"] for c in lin} >= {"tensor", "row", "group:32", "group:128", "none"}
    assert any(c["m"] % 32 and c["k"] % 4 for c in lin)  # ragged shapes
    # tl2: chunk-major blobs; a panel-major one with full panels of TL2_PANEL row blocks, a
    # short last one and a tl1 tail, of a K below 4080 (chunk-major in kernels/5); and one of
    # two panels of unequal row blocks with a tl1 tail (chunk-major in kernels/6); and one of
    # two panels of a K below 2544 (chunk-major in kernels/7)
    tl2 = [R.layout("tl2", c["m"], c["k"]) for c in lin if c["format"] == "tl2"]
    assert all(t.panel_rows == tl2_panel_of(t.m, t.k, R.LAYOUT) for t in tl2)
    assert any(not t.paneled for t in tl2)
    assert any(t.paneled and t.panel_rows == TL2_PANEL and t.row_blocks > TL2_PANEL
               and t.row_blocks % TL2_PANEL and t.kp1 and t.k < 4080 for t in tl2)
    assert any(t.paneled and t.row_blocks == 2 * t.panel_rows - 1 and t.kp1
               and not tl2_panel_of(t.m, t.k, "kernels/6") for t in tl2)
    assert any(t.paneled and t.k < 2544 and t.kp1 and not tl2_panel_of(t.m, t.k, "kernels/7")
               for t in tl2)
    # int1 (panel-major, kernels/9): one panel; two panels of unequal row blocks (n = 1); and
    # more than two panels (n = 2) of fewer than INT1_PANEL row blocks and a short last one;
    # each of a K not a multiple of 32
    int1 = [R.layout("int1", c["m"], c["k"]) for c in lin if c["format"] == "int1"]
    assert all(t.panel_rows == int1_panels(t.m)[0] for t in int1)
    assert any(t.row_blocks == 1 for t in int1)
    assert any(int1_panels(t.m) == [t.panel_rows, t.panel_rows - 1] and t.panel_rows > 1
               and t.k % 32 for t in int1)
    assert any(len(int1_panels(t.m)) > 2 and t.panel_rows < INT1_PANEL
               and int1_panels(t.m)[-1] < t.panel_rows and t.k % 32 for t in int1)
    assert {c["kind"] for c in vectors.cases} == {"linear", "recipe"}


def test_pack_is_byte_identical_to_go(vectors):
    for c in _linear_cases(vectors):
        cfg, a = _cfg(c), vectors.arrays(c)
        w = a["w"].view(c["m"], c["k"])
        blob = R.pack(cfg.format, w)
        assert blob.numel() == R.layout(cfg.format, c["m"], c["k"]).nbytes
        assert torch.equal(blob, a["blob"]), c["name"]


def test_int1_relayout_of_kernels_8_is_go_pack(vectors):
    """Go's int1 blobs (kernels/9) are what relayout makes of the same weights packed as
    kernels/1 to kernels/8 did (int1_v8), a two-panel one and one of more than two panels
    with a short last one among them."""
    cases = [c for c in _linear_cases(vectors) if c["format"] == "int1"]
    assert any(len(int1_panels(c["m"])) == 2 and c["m"] > 32 for c in cases)
    assert any(len(int1_panels(c["m"])) > 2 and int1_panels(c["m"])[-1] < int1_panels(c["m"])[0]
               for c in cases)
    for c in cases:
        a = vectors.arrays(c)
        old = int1_v8(a["w"].view(c["m"], c["k"]))
        assert old.numel() == a["blob"].numel()
        assert torch.equal(R.relayout("int1", c["m"], c["k"], old, "kernels/8"), a["blob"]), \
            c["name"]


def test_unpack_inverts_go_pack(vectors):
    for c in _linear_cases(vectors):
        cfg, a = _cfg(c), vectors.arrays(c)
        w = a["w"].view(c["m"], c["k"])
        got = R.unpack(cfg.format, c["m"], c["k"], a["blob"])
        if cfg.is_float:
            want = R.from_bf16_bits(R.bf16_bits(w)) if c["format"] == "bf16" else w
            assert_bits_equal(got, want, c["name"])
        else:
            assert torch.equal(got, w), c["name"]


def test_padding_holds_the_format_padding_value(vectors):
    for c in _linear_cases(vectors):
        cfg, a = _cfg(c), vectors.arrays(c)
        if cfg.is_float:
            continue
        lay = R.layout(cfg.format, c["m"], c["k"])
        full = R._unpack_padded(lay, a["blob"])
        pad = 1 if c["format"] == "int1" else 0
        assert bool((full[c["m"]:] == pad).all()) and bool((full[:, c["k"]:] == pad).all()), \
            c["name"]


def test_linear_float32_is_bit_identical_to_go(vectors):
    for c in _linear_cases(vectors):
        cfg, a = _cfg(c), vectors.arrays(c)
        m, k, n = c["m"], c["k"], c["n"]
        y = R.linear_packed(a["x"].view(n, k), a["blob"], a.get("scales"), a.get("bias"), cfg,
                            m, k)
        assert_bits_equal(y, a["y"].view(n, m), c["name"])


def test_linear_bfloat16_is_bit_identical_to_go(vectors):
    for c in _linear_cases(vectors):
        cfg, a = _cfg(c), vectors.arrays(c)
        m, k, n = c["m"], c["k"], c["n"]
        x = R.from_bf16_bits(a["x_bf16"]).view(n, k).to(torch.bfloat16)
        y = R.linear_packed(x, a["blob"], a.get("scales"), a.get("bias"), cfg, m, k)
        assert y.dtype == torch.bfloat16
        got = y.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
        assert torch.equal(got, a["y_bf16"].view(n, m)), c["name"]


def test_recipes_are_identical_to_go(vectors):
    cases = [c for c in vectors.cases if c["kind"] == "recipe"]
    assert {c["format"] for c in cases} == {"i2s", "tl1", "tl2", "int2", "int1", "int8"}
    for c in cases:
        cfg, a = _cfg(c), vectors.arrays(c)
        q, s = R.quantize_weights(cfg, a["wf"].view(c["m"], c["k"]))
        assert_bits_equal(s, a["s"], c["name"] + " scales")
        assert torch.equal(q.reshape(-1), a["q"]), c["name"] + " weights"


@pytest.mark.parametrize("fmt", ["i2s", "tl1", "tl2"])
def test_ternarize_matches_go_for_one_tensor(vectors, fmt):
    # ternarize / ternarize_rows are the recipes' entry points for the ternary formats.
    for c in vectors.cases:
        if c["kind"] != "recipe" or c["format"] != fmt:
            continue
        a = vectors.arrays(c)
        w = a["wf"].view(c["m"], c["k"])
        q, s = R.ternarize(w) if c["scale"] == "tensor" else R.ternarize_rows(w)
        assert_bits_equal(s, a["s"], c["name"])
        assert torch.equal(q.reshape(-1), a["q"]), c["name"]
