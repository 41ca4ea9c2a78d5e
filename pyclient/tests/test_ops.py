"""The operator bitgo::linear: registration, checks, and on torch >= 2.4 opcheck and
torch.compile(fullgraph=True) with inductor on the CPU."""

import pytest
import torch
from torch import nn

import bitgo
from bitgo import _ops
from bitgo.config import QuantConfig
from conftest import assert_bits_equal, torch_at_least

NEW_TORCH = torch_at_least(2, 4)


def _layer(cfg, k=96, m=40, bias=True):
    torch.manual_seed(0)
    return bitgo.BitLinear.from_linear(nn.Linear(k, m, bias=bias), cfg)


def test_op_lives_in_the_bitgo_namespace():
    op = torch.ops.bitgo.linear
    assert "bitgo::linear" in str(op.default._schema)
    s = str(op.default._schema)
    assert "Tensor x" in s and "str spec" in s and "Int handle" in s.replace("int", "Int")
    assert _ops.HAS_CUSTOM_OP == NEW_TORCH


def test_op_checks_its_arguments():
    b = _layer(QuantConfig(format="i2s"))
    x = torch.randn(3, 96)
    with pytest.raises(ValueError, match="not contiguous"):
        _ops.linear(torch.randn(96, 3).t(), b.packed, b.scales, b.bias, b._spec)
    with pytest.raises(ValueError, match="packed weights are torch.uint8 with 10 elements"):
        _ops.linear(x, b.packed[:10], b.scales, b.bias, b._spec)
    with pytest.raises(ValueError, match="scales are torch.float64"):
        _ops.linear(x, b.packed, b.scales.double(), b.bias, b._spec)
    with pytest.raises(RuntimeError, match="handle 12345 is not registered"):
        _ops.linear(x, b.packed, b.scales, b.bias, b._spec, 12345)
    # the implementation refuses tensors on another device (meta here: the only non-CPU
    # device a CPU build has; on torch >= 2.4 meta tensors get the fake implementation)
    with pytest.raises(ValueError, match="input is on device meta; bitgo runs on CPU"):
        _ops._linear_impl(torch.empty(3, 96, device="meta"), b.packed, b.scales, b.bias,
                          b._spec, 0)


def test_runner_registration_routes_calls():
    b = _layer(QuantConfig(format="tl1"))
    seen = []

    def runner(x, packed, scales, bias, spec):
        cfg, m, k = _ops.parse_spec(spec)
        seen.append((tuple(x.shape), cfg.format.value, m, k))
        return torch.zeros(*x.shape[:-1], m, dtype=x.dtype)

    _ops.register_runner(7, runner)
    try:
        y = _ops.linear(torch.randn(2, 96), b.packed, b.scales, b.bias, b._spec, 7)
    finally:
        _ops.unregister_runner(7)
    assert seen == [((2, 96), "tl1", 40, 96)] and y.shape == (2, 40)
    with pytest.raises(ValueError, match="must be positive"):
        _ops.register_runner(0, runner)


@pytest.mark.skipif(not NEW_TORCH, reason="torch.library.opcheck needs torch >= 2.4")
@pytest.mark.parametrize("cfg", [QuantConfig(format="i2s"),
                                 QuantConfig(format="int2", act="per-group:32", scale="group:32"),
                                 QuantConfig(format="bf16")],
                         ids=lambda c: c.format.value)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("through", ["reference", "bitd"])
def test_opcheck(cfg, dtype, bias, through):
    b = _layer(cfg, bias=bias)
    assert b.handle != 0
    x = torch.randn(2, 3, 96).to(dtype)
    handle = b.handle if through == "bitd" else 0
    res = torch.library.opcheck(torch.ops.bitgo.linear.default,
                                (x, b.packed, b.scales, b.bias, b._spec, handle))
    assert all(v == "SUCCESS" for v in res.values()), res


@pytest.mark.skipif(not NEW_TORCH, reason="torch.compile of custom ops needs torch >= 2.4")
def test_torch_compile_fullgraph_inductor_cpu():
    torch._dynamo.reset()

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(96, 128)
            self.down = nn.Linear(128, 96, bias=False)

        def forward(self, x):
            # element-wise ops only around the bitgo layers: inductor's own reductions (a
            # LayerNorm, say) need not match eager bit for bit, and this test is about ours
            return x + self.down(torch.relu(self.up(x)) ** 2)

    torch.manual_seed(1)
    model = bitgo.quantize_(Block(), QuantConfig(format="i2s"))
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        for shape in [(1, 96), (7, 96), (2, 3, 96)]:
            x = torch.randn(*shape)
            assert_bits_equal(compiled(x), model(x), str(shape))


def test_eager_op_on_old_and_new_torch():
    b = _layer(QuantConfig(format="int8"))
    x = torch.randn(4, 96)
    y = torch.ops.bitgo.linear(x, b.packed, b.scales, b.bias, b._spec, 0)
    assert_bits_equal(y, bitgo.reference.linear(b, x))


def test_registered_handle_checks_every_argument():
    """Calls through a bitd registration are checked as strictly as reference calls: the
    fast path (the registered tensors themselves) and the slow one (anything else) refuse the
    same bad inputs, accept copies of the registered weights, and refuse other weights."""
    b = _layer(QuantConfig(format="i2s"))
    assert b.handle != 0
    x = torch.randn(3, 96)
    want = bitgo.reference.linear(b, x)
    h, spec = b.handle, b._spec
    assert_bits_equal(_ops.linear(x, b.packed, b.scales, b.bias, spec, h), want)
    # copies of the weights (what opcheck and compilers may pass) are the same layer
    assert_bits_equal(_ops.linear(x, b.packed.clone(), b.scales.clone(), b.bias.clone(),
                                  spec, h), want)
    assert_bits_equal(_ops.linear(x, b.packed, b.scales, b.bias, spec, h), want)
    with pytest.raises(TypeError, match="input dtype torch.float64"):
        _ops.linear(x.double(), b.packed, b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="last dimension must be in_features = 96"):
        _ops.linear(torch.randn(3, 95), b.packed, b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="last dimension must be in_features = 96"):
        _ops.linear(torch.tensor(1.0), b.packed, b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="not contiguous"):
        _ops.linear(torch.randn(96, 3).t(), b.packed, b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="packed weights are torch.uint8 with 10 elements"):
        _ops.linear(x, b.packed[:10], b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="scales are torch.float64"):
        _ops.linear(x, b.packed, b.scales.double(), b.bias, spec, h)
    other = b.packed.clone()
    other[0] ^= 1
    with pytest.raises(ValueError, match="differ from those handle .* was registered with"):
        _ops.linear(x, other, b.scales, b.bias, spec, h)
    with pytest.raises(ValueError, match="was registered as"):
        _ops.linear(x, b.packed, b.scales, b.bias, spec.replace("per-token", "per-tensor"), h)
    # and the registered tensors still take the fast path with the right answer
    assert_bits_equal(_ops.linear(x, b.packed, b.scales, b.bias, spec, h), want)
    # another bias than the registered one is checked too (a size-1 bias would broadcast)
    with pytest.raises(ValueError, match="bias is torch.float32 with 1 elements, want float32 with 40"):
        _ops.linear(x, b.packed, b.scales, torch.ones(1), spec, h)
    with pytest.raises(ValueError, match="bias is torch.float64"):
        _ops.linear(x, b.packed, b.scales, b.bias.double(), spec, h)
    assert_bits_equal(_ops.linear(x, b.packed, b.scales, None, spec, h),
                      bitgo.reference.linear_packed(x, b.packed, b.scales, None, b.config, 40, 96))


def test_registered_handle_fast_path_with_wrapping_parameters():
    """vLLM registers .data tensors and calls with the Parameters around them: the first call
    checks them, and they then take the fast path (same answers)."""
    b = _layer(QuantConfig(format="i2s"), bias=True)
    x = torch.randn(2, 96)
    want = bitgo.reference.linear(b, x)
    r = b._remote
    packed, scales, bias = (nn.Parameter(t, requires_grad=False)
                            for t in (b.packed, b.scales, b.bias))
    assert_bits_equal(_ops.linear(x, packed, scales, bias, b._spec, b.handle), want)
    assert r._known[0] is packed and r._known[1] is scales and r._known[2] is bias
    assert_bits_equal(_ops.linear(x, packed, scales, bias, b._spec, b.handle), want)
