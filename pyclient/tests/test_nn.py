"""bitgo.BitLinear and bitgo.quantize_."""

import io

import pytest
import torch
from torch import nn

import bitgo
from bitgo import reference as R
from bitgo.config import QuantConfig
from conftest import (DTYPES, FORMATS, TL2_CHUNK_OF, assert_bits_equal, int1_v8,
                      tl2_as_revision, tl2_panel_of)

CONFIGS = [QuantConfig(format=f) for f in FORMATS] + [
    QuantConfig(format="i2s", act="per-group:128", scale="row"),
    QuantConfig(format="int2", act="per-group:32", scale="group:64", codebook=(-3, -1, 1, 3)),
    QuantConfig(format="int8", act="per-tensor", scale="tensor"),
    QuantConfig(format="int1", scale="group:32"),
]
SHAPES = [(1,), (7,), (2, 3)]


def _id(c):
    return f"{c.format.value}-{c.act}-{c.scale}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("lead", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_equals_reference(cfg, lead, dtype):
    torch.manual_seed(0)
    lin = nn.Linear(200, 70)
    b = bitgo.BitLinear.from_linear(lin, cfg)
    x = (torch.randn(*lead, 200) * 2).to(dtype)
    y = b(x)
    assert y.shape == (*lead, 70) and y.dtype == dtype
    assert_bits_equal(y, R.linear(b, x), f"{_id(cfg)} {dtype}")


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_from_linear_uses_the_recipe(cfg):
    torch.manual_seed(1)
    lin = nn.Linear(100, 33, bias=False).to(torch.bfloat16)
    b = bitgo.BitLinear.from_linear(lin, cfg)
    q, s = R.quantize_for(cfg, lin.weight.detach().float())
    if cfg.is_float:
        want = R.from_bf16_bits(R.bf16_bits(q)) if cfg.format.value == "bf16" else q
        assert_bits_equal(b.logical_weights(), want)
    else:
        assert torch.equal(b.logical_weights(), q)
        assert_bits_equal(b.scales, s)
    assert b.bias is None and b.weight.shape == (33, 100) and b.weight.dtype == torch.float32


def test_ternary_from_linear_is_absmean():
    w = torch.tensor([[0.3, -0.05, 0.0, 1.2], [-0.6, 0.1, 0.25, -0.2]])
    lin = nn.Linear(4, 2, bias=False)
    lin.weight.data = w
    b = bitgo.BitLinear.from_linear(lin, QuantConfig(format="i2s"))
    s = w.abs().double().sum().div(8).float()
    assert float(b.scales[0]) == float(s)
    assert b.logical_weights().tolist() == [[1, 0, 0, 1], [-1, 0, 1, -1]]  # s = 0.3375


def test_nn_linear_attributes_and_repr():
    b = bitgo.BitLinear(64, 32, config=QuantConfig(format="tl1"))
    assert (b.in_features, b.out_features) == (64, 32)
    assert b.weight.shape == (32, 64) and b.bias.shape == (32,)
    assert not b.bias.requires_grad
    assert "in_features=64, out_features=32, bias=True, format=tl1" in repr(b)
    assert bitgo.BitLinear(8, 4, bias=False).bias is None
    with pytest.raises(ValueError, match="BitLinear keeps its packed weights on the CPU"):
        bitgo.BitLinear(8, 4, device="meta")
    with pytest.raises(TypeError, match="bitgo.QuantConfig"):
        bitgo.BitLinear(8, 4, config={"format": "i2s"})
    with pytest.raises(ValueError, match=r"in_features \(K\) = 70000"):
        bitgo.BitLinear(70000, 4, config=QuantConfig(format="int8"))


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_state_dict_round_trip(cfg):
    torch.manual_seed(2)
    a = bitgo.BitLinear.from_linear(nn.Linear(96, 40), cfg)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = bitgo.BitLinear(96, 40, config=cfg)
    b.load_state_dict(torch.load(buf))
    x = torch.randn(3, 96)
    assert_bits_equal(b(x), a(x))
    assert torch.equal(b.packed, a.packed) and torch.equal(b.scales, a.scales)


def test_state_dict_refuses_another_config_or_shape():
    a = bitgo.BitLinear(128, 40, config=QuantConfig(format="i2s"))
    b = bitgo.BitLinear(128, 40, config=QuantConfig(format="tl1"))  # same blob size as i2s
    assert a.packed.shape == b.packed.shape
    with pytest.raises(ValueError, match="saved for .*'format': 'i2s'"):
        b.load_state_dict(a.state_dict())
    c = bitgo.BitLinear(256, 40, config=QuantConfig(format="i2s"))
    with pytest.raises((ValueError, RuntimeError), match="packed"):
        c.load_state_dict(a.state_dict())


def test_dtype_casts_keep_the_float32_epilogue():
    torch.manual_seed(3)
    b = bitgo.BitLinear.from_linear(nn.Linear(64, 16), QuantConfig(format="int8"))
    x = torch.randn(2, 64)
    y = b(x)
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.double()):
        cast(b)
        assert b.scales.dtype == torch.float32 and b.bias.dtype == torch.float32
        assert b.packed.dtype == torch.uint8
        assert_bits_equal(b(x), y)


def test_bad_inputs_are_clear_errors():
    b = bitgo.BitLinear(64, 16)
    with pytest.raises(ValueError, match="last dimension must be in_features = 64"):
        b(torch.randn(2, 63))
    x = torch.randn(2, 64)
    x[1, 5] = float("nan")
    with pytest.raises(ValueError, match="(?i)activation of token 1, input 5 is nan"):
        b(x)
    with pytest.raises(TypeError, match="dtype torch.float64"):
        b(torch.randn(2, 64, dtype=torch.float64))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        b([1.0] * 64)


def test_non_contiguous_inputs_work_through_the_module():
    b = bitgo.BitLinear(64, 16)
    x = torch.randn(64, 5).t()  # [5, 64], not contiguous
    assert not x.is_contiguous()
    assert_bits_equal(b(x), b(x.contiguous()))


def test_set_weights_and_set_logical_validate():
    b = bitgo.BitLinear(8, 4, config=QuantConfig(format="int2"))
    with pytest.raises(ValueError, match=r"want \(out_features, in_features\) = \(4, 8\)"):
        b.set_weights(torch.randn(8, 4))
    with pytest.raises(ValueError, match="scales: want 4 values"):
        b.set_logical(torch.zeros(4, 8, dtype=torch.int8), torch.ones(1))
    with pytest.raises(ValueError, match="scale 2 is inf"):
        b.set_logical(torch.zeros(4, 8, dtype=torch.int8),
                      torch.tensor([1.0, 1.0, float("inf"), 1.0]))
    with pytest.raises(ValueError, match="code indices 0..3"):
        b.set_logical(torch.full((4, 8), 5, dtype=torch.int8), torch.ones(4))


class Tiny(nn.Module):
    def __init__(self, tie=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(50, 32)
        self.layers = nn.ModuleList([nn.ModuleDict({"q_proj": nn.Linear(32, 32),
                                                    "mlp": nn.Linear(32, 64, bias=False)})
                                     for _ in range(2)])
        self.embed_proj = nn.Linear(32, 32)
        self.lm_head = nn.Linear(32, 50, bias=False)
        self.out = nn.Linear(32, 50, bias=False)
        if tie:
            self.out.weight = self.embed_tokens.weight


def _kinds(model):
    return {n: type(m).__name__ for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, bitgo.BitLinear))}


def test_quantize_default_filter():
    m = bitgo.quantize_(Tiny(tie=True), QuantConfig(format="i2s"))
    k = _kinds(m)
    assert k["layers.0.q_proj"] == k["layers.1.mlp"] == "BitLinear"
    assert k["lm_head"] == k["embed_proj"] == k["out"] == "Linear"  # out is tied to the embedding
    assert isinstance(m.embed_tokens, nn.Embedding)


def test_quantize_modules_to_not_convert_and_filter_fn():
    m = bitgo.quantize_(Tiny(), QuantConfig(format="tl2", modules_to_not_convert=["layers.1"]))
    k = _kinds(m)
    assert k["layers.0.q_proj"] == "BitLinear" and k["layers.1.q_proj"] == "Linear"
    assert k["out"] == "BitLinear"
    m = bitgo.quantize_(Tiny(), filter_fn=lambda mod, fqn: fqn.endswith("mlp"))
    k = _kinds(m)
    assert k["layers.0.mlp"] == "BitLinear" and k["layers.0.q_proj"] == "Linear"


def test_quantize_keeps_the_model_working():
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    x = torch.randn(3, 64)
    bitgo.quantize_(model, QuantConfig(format="int8"))
    assert isinstance(model[0], bitgo.BitLinear) and isinstance(model[2], bitgo.BitLinear)
    h = R.linear(model[0], x).relu()
    assert_bits_equal(model(x), R.linear(model[2], h))
    with pytest.raises(ValueError, match="wrap a bare nn.Linear"):
        bitgo.quantize_(nn.Linear(4, 4))


def test_input_requiring_grad_leaves_the_shared_views_alone():
    """An input that requires grad is computed like any other (bitgo has no backward), and
    the client's cached shared-memory views never join an autograd graph (which would chain
    a node per later call)."""
    b = bitgo.BitLinear(64, 32, bias=True)
    x = torch.randn(2, 64, requires_grad=True)
    assert_bits_equal(b(x), bitgo.reference.linear(b, x.detach()))
    x2 = torch.randn(2, 64)
    assert_bits_equal(b(x2), bitgo.reference.linear(b, x2))
    c = bitgo.client.default_client()
    for ent in c._views.values():
        assert not ent[0].requires_grad and not ent[1].requires_grad


def _state_as(sd, m, k, fmt, rev):
    """A state dict as a release of layout ``rev`` saved it: tl2's packed bytes as ``rev`` laid
    them out (tl2_as_revision: chunks of up to 12 blocks in kernels/3, 10 in kernels/4 to
    kernels/7, kernels/5's panels of 16 for K >= 4080 and M > 4064, kernels/6's of 32 for
    K >= 2544 and M > 3808 and kernels/7's (two below M = 3809) for K >= 2544 and M > 2016;
    the bytes of this revision where it lays the shape out the same
    way); int1's as kernels/1 to kernels/8 packed them (int1_v8: row block after row block,
    VNNI4-interleaved); and the extra state's "layout" ``rev``, or none before kernels/4."""
    old = dict(sd)
    extra = dict(old["_extra_state"])
    assert extra.pop("layout") == R.LAYOUT
    if rev != "kernels/3":
        extra["layout"] = rev
    old["_extra_state"] = extra
    if fmt == "tl2":
        old["packed"] = tl2_as_revision(sd["packed"], m, k, rev).reshape(sd["packed"].shape)
        g = tl2_panel_of(m, k, R.LAYOUT)
        same = tl2_panel_of(m, k, rev) == g and (g > 0 or TL2_CHUNK_OF[rev] == 10)
        assert torch.equal(old["packed"], sd["packed"]) == same
    if fmt == "int1":
        old["packed"] = int1_v8(R.unpack("int1", m, k, sd["packed"])).reshape(sd["packed"].shape)
        assert not torch.equal(old["packed"], sd["packed"])
    return old


@pytest.mark.parametrize("rev", ["kernels/3", "kernels/4", "kernels/5", "kernels/6",
                                 "kernels/7", "kernels/8"])
@pytest.mark.parametrize("fmt", ["tl2", "i2s", "tl1", "int1"])
def test_state_dict_of_earlier_layouts(fmt, rev):
    """A state saved in kernels/4 to kernels/8, or before layouts were recorded (kernels/3),
    loads, its tl2 blob laid out anew (a kernels/4 to kernels/8 blob of this shape,
    chunk-major still, as it was) and its int1 blob encoded anew (kernels/9); a tl2 state of
    kernels/1 is refused, naming the revisions."""
    torch.manual_seed(4)
    m, k = 40, 48 * 11 + 3  # tl2: one chunk in kernels/3, two in kernels/4 on
    a = bitgo.BitLinear.from_linear(nn.Linear(k, m), QuantConfig(format=fmt))
    assert a.state_dict()["_extra_state"]["layout"] == R.LAYOUT
    b = bitgo.BitLinear(k, m, config=QuantConfig(format=fmt))
    b.load_state_dict(_state_as(a.state_dict(), m, k, fmt, rev))
    assert torch.equal(b.packed, a.packed)
    x = torch.randn(3, k)
    assert_bits_equal(b(x), a(x))
    if fmt == "tl2":
        # Without "packed" in the state (strict=False), the layer's own blob is left alone.
        partial = _state_as(a.state_dict(), m, k, fmt, rev)
        del partial["packed"]
        c = bitgo.BitLinear.from_linear(nn.Linear(k, m), QuantConfig(format=fmt))
        own = c.packed.clone()
        c.load_state_dict(partial, strict=False)
        assert torch.equal(c.packed, own)
        sd = a.state_dict()
        sd["_extra_state"] = dict(sd["_extra_state"], layout="kernels/1")
        with pytest.raises(ValueError, match="layout kernels/1: tl2 blobs changed layout in kernels/2"):
            bitgo.BitLinear(k, m, config=QuantConfig(format=fmt)).load_state_dict(sd)


@pytest.mark.parametrize("m,k,rev,g", [
    (130 * 32 - 5, 48 * 88 + 7, "kernels/4", 0), (130 * 32 - 5, 48 * 88 + 7, "kernels/5", 16),
    (4000, 2600, "kernels/5", 0), (4000, 2600, "kernels/6", 32), (2500, 2600, "kernels/6", 0),
    (4000, 2600, "kernels/7", 32), (2500, 2600, "kernels/7", 40), (2500, 1200, "kernels/7", 0),
])
def test_state_dict_of_earlier_panel_major(m, k, rev, g):
    """A tl2 state of an earlier revision of a panel-major shape loads laid out panel-major,
    and bitd computes on it what the reference does: 4155 x 4231 (130 row blocks of 88 blocks
    and a tail), chunk-major in kernels/4 and panel-major in panels of 16 in kernels/5; 4000 x
    2600 (125 row blocks of 54 blocks and a tail), chunk-major in kernels/5 and in panels of
    32 in kernels/6 and kernels/7, as now; 2500 x 2600 (79 row blocks), chunk-major in
    kernels/6, two panels (of 40 and 39 row blocks) in kernels/7, as now; 2500 x 1200 (79 row
    blocks of 25 blocks), chunk-major in kernels/7, two panels of 40 and 39 now."""
    torch.manual_seed(5)
    assert R.layout("tl2", m, k).paneled
    assert tl2_panel_of(m, k, rev) == g  # the panels of the saved blob (0: chunk-major)
    a = bitgo.BitLinear.from_linear(nn.Linear(k, m), QuantConfig(format="tl2"))
    b = bitgo.BitLinear(k, m, config=QuantConfig(format="tl2"))
    b.load_state_dict(_state_as(a.state_dict(), m, k, "tl2", rev))
    assert torch.equal(b.packed, a.packed)
    x = torch.randn(3, k)
    y = b(x)
    assert_bits_equal(y, a(x))
    assert_bits_equal(y, R.linear(b, x))
