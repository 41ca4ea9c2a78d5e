"""bitgo.vllm: registration, BitgoConfig, and BitgoLinearMethod's shard arithmetic, loading
paths, packing and apply, exercised through the vLLM stand-ins in vllm_standins.py (vLLM
itself cannot be installed here; see that file)."""

import logging
import sys

import pytest
import torch

import bitgo.vllm as bv
from bitgo import reference as R
from bitgo.config import QuantConfig
from conftest import assert_bits_equal
import vllm_standins as S


@pytest.fixture
def vllm(monkeypatch):
    env = S.install(monkeypatch)
    bv._built.clear()
    bv._registered_with = None
    bv.register()  # what vLLM's plugin loader does first in every process
    yield env
    bv._built.clear()
    bv._registered_with = None
    S.TP.rank, S.TP.size = 0, 1


def test_register_without_vllm_logs_and_returns(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm...` fail
    bv._registered_with = None
    with caplog.at_level(logging.INFO, logger="bitgo.vllm"):
        bv.register()
        bv.register()
    assert "vLLM is not installed" in caplog.text
    with pytest.raises(ImportError):
        bv.BitgoConfig  # the classes need vLLM


def test_register_is_idempotent(vllm):
    bv.register()
    bv.register()
    reg = vllm.registry
    assert reg.methods.count("bitgo") == 1 and reg.custom["bitgo"] is bv.BitgoConfig
    assert reg.get_quantization_config("bitgo") is bv.BitgoConfig
    assert vllm.linear.WEIGHT_LOADER_V2_SUPPORTED.count("BitgoLinearMethod") == 1
    assert reg.warnings == []
    bv._registered_with = None  # a fresh process sees the same registry: still one entry
    bv.register()
    assert reg.methods.count("bitgo") == 1 and reg.warnings == []


def test_register_with_an_older_strict_vllm(monkeypatch, caplog):
    env = S.install(monkeypatch, strict_registry=True)
    bv._built.clear()
    bv._registered_with = None
    env.registry.methods.append("bitgo")
    env.registry.custom["bitgo"] = object  # someone else's
    with caplog.at_level(logging.WARNING, logger="bitgo.vllm"):
        bv.register()
    assert "already has a quantization method 'bitgo'" in caplog.text
    bv._built.clear()
    bv._registered_with = None


def test_config_interface(vllm):
    C = bv.BitgoConfig
    c = C()  # vLLM's call when the checkpoint has no quantization_config
    assert c.get_name() == "bitgo" and C.get_min_capability() == 0
    assert C.get_config_filenames() == []
    assert torch.bfloat16 in c.get_supported_act_dtypes()
    assert c.quant == QuantConfig(format="i2s")
    c = C.from_config({"quant_method": "bitgo", "format": "int2", "scale": "group:64"})
    assert c.quant.format.value == "int2" and c.quant.scale == "group:64"
    c = C.from_config({"quant_method": "bitnet", "linear_class": "autobitlinear",
                       "modules_to_not_convert": ["vision"]})
    assert c.settings.source == "bitnet" and not c.settings.weight_scale_inverse
    assert c.quant.modules_to_not_convert == ("lm_head", "vision")
    assert C.from_config({"quant_method": "bitnet", "quantization_mode": "online"}) \
        .settings.source == "float"
    with pytest.raises(ValueError, match="quant_method 'gptq'"):
        C.from_config({"quant_method": "gptq"})
    with pytest.raises(ValueError, match="scale 'group:100'"):
        C.from_config({"quant_method": "bitgo", "format": "int2", "scale": "group:100"})
    o = C.override_quantization_method
    assert o({"quant_method": "bitgo", "format": "i2s"}, None) == "bitgo"
    assert o({"quant_method": "bitnet"}, "bitgo") == "bitgo"
    assert o({"quant_method": "bitnet"}, None) is None
    assert o({"quant_method": "gptq"}, "bitgo") is None
    assert o({"quant_method": "bitnet"}, "bitgo", hf_config=object()) == "bitgo"


def test_get_quant_method(vllm):
    cfg = bv.BitgoConfig(bv.BitgoSettings(quant=QuantConfig(modules_to_not_convert=["mlp.down"])))
    cfg.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    qkv = S.QKVParallelLinear(64, 16, 4, 2, quant_config=cfg, prefix="model.layers.0.attn.qkv_proj")
    assert type(qkv.quant_method).__name__ == "BitgoLinearMethod"
    down = S.RowParallelLinear(64, 64, quant_config=cfg, prefix="model.layers.0.mlp.down_proj")
    assert isinstance(down.quant_method, S.UnquantizedLinearMethod)
    head = S.ColumnParallelLinear(64, 64, quant_config=cfg, prefix="lm_head")
    assert isinstance(head.quant_method, S.UnquantizedLinearMethod)
    emb = S.VocabParallelEmbedding(100, 64, quant_config=cfg, prefix="model.embed_tokens")
    lmh = S.ParallelLMHead(100, 64, quant_config=cfg, prefix="lm_head")
    assert isinstance(emb.quant_method, S.UnquantizedEmbeddingMethod)
    assert isinstance(lmh.quant_method, S.UnquantizedEmbeddingMethod)
    assert cfg.get_quant_method(torch.nn.LayerNorm(4), "model.norm") is None
    # a fused layer whose shards disagree is refused, all skipped is skipped
    cfg2 = bv.BitgoConfig(bv.BitgoSettings(quant=QuantConfig(
        modules_to_not_convert=["layers.0.attn.q_proj"])))
    cfg2.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    with pytest.raises(ValueError, match="some but not all of its shards"):
        S.QKVParallelLinear(64, 16, 4, 2, quant_config=cfg2, prefix="model.layers.0.attn.qkv_proj")
    cfg2.quant = QuantConfig(modules_to_not_convert=["layers.0.attn"])
    cfg2.settings = bv.BitgoSettings(quant=cfg2.quant)
    l = S.QKVParallelLinear(64, 16, 4, 2, quant_config=cfg2, prefix="model.layers.0.attn.qkv_proj")
    assert isinstance(l.quant_method, S.UnquantizedLinearMethod)


def test_is_layer_skipped_without_vllm():
    m = {"gate_up_proj": ["gate_proj", "up_proj"]}
    assert bv.is_layer_skipped("lm_head", [])
    assert bv.is_layer_skipped("model.embed_tokens", [])
    assert not bv.is_layer_skipped("model.layers.1.mlp.gate_up_proj", ["layers.10."], m)
    assert bv.is_layer_skipped("model.layers.1.mlp.gate_up_proj", ["layers.1."], m)


# --- loading ---------------------------------------------------------------------------------

H, HD, NH, NKV = 96, 16, 4, 2  # hidden, head size, heads, KV heads

CONFIGS = [
    QuantConfig(format="i2s"),
    QuantConfig(format="tl2", scale="row"),
    QuantConfig(format="int2", act="per-group:32", scale="group:32", codebook=(-3, -1, 1, 3)),
    QuantConfig(format="int8", scale="tensor"),
    QuantConfig(format="int1", scale="row"),
    QuantConfig(format="bf16"),
]


def _id(c):
    return f"{c.format.value}-{c.scale}"


def _checkpoint(gen, rows, cols, scale=1.0):
    return (torch.randn(rows, cols, generator=gen) * scale).to(torch.bfloat16)


def _load(layer, name, tensor, *shard):
    param = getattr(layer, name)
    param.weight_loader(param, tensor, *shard)


def _expected_rows(cfg, x, w_full, bias_full, lo, n):
    """Output columns [lo, lo+n) of the whole checkpoint tensor as one bitgo layer."""
    q, s = R.quantize_for(cfg, w_full.float())
    y = R.linear_logical(x, q, s, bias_full, cfg)
    return y[:, lo: lo + n]


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 0), (2, 1), (4, 3)])
def test_qkv_shards_load_like_separate_layers(vllm, cfg, tp, rank):
    """q/k/v checkpoint tensors, per-tensor scales that differ per shard, KV heads split or
    replicated across ranks: each rank computes exactly the rows a single bitgo layer per
    checkpoint tensor would."""
    S.TP.rank, S.TP.size = rank, tp
    gen = torch.Generator().manual_seed(10 + tp + rank)
    qc = bv.BitgoConfig(bv.BitgoSettings(quant=cfg))
    layer = S.QKVParallelLinear(H, HD, NH, NKV, bias=True, params_dtype=torch.bfloat16,
                                quant_config=qc, prefix="model.layers.0.self_attn.qkv_proj")
    ws = {"q": _checkpoint(gen, NH * HD, H, 1.0), "k": _checkpoint(gen, NKV * HD, H, 0.3),
          "v": _checkpoint(gen, NKV * HD, H, 2.0)}
    bs = {k: torch.randn(w.shape[0], generator=gen).to(torch.bfloat16) for k, w in ws.items()}
    for sid, w in ws.items():
        _load(layer, "weight", w, sid)
        layer.weight_loader(layer.bias, bs[sid], sid)  # v1 loader for the bias
    layer.quant_method.process_weights_after_loading(layer)
    assert not hasattr(layer, "weight") or layer.weight is None
    x = torch.randn(3, H, generator=gen)
    y = layer(x)[0]
    parts = []
    for sid, w in ws.items():
        n = layer.num_heads * HD if sid == "q" else layer.num_kv_heads * HD
        part = rank if sid == "q" else rank // layer.num_kv_head_replicas
        parts.append(_expected_rows(cfg, x, w, bs[sid].float(), part * n, n))
    assert_bits_equal(y, torch.cat(parts, dim=1), f"{_id(cfg)} tp={tp} rank={rank}")
    if cfg.scale == "tensor" and not cfg.is_float:
        assert layer.bitgo_config.scale == "row"  # the shards' scales differ


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 1)])
def test_merged_gate_up_and_fused_on_disk(vllm, cfg, tp, rank):
    S.TP.rank, S.TP.size = rank, tp
    gen = torch.Generator().manual_seed(20 + rank)
    qc = bv.BitgoConfig(bv.BitgoSettings(quant=cfg))
    sizes = [128, 64]
    gate, up = _checkpoint(gen, 128, H), _checkpoint(gen, 64, H, 3.0)
    x = torch.randn(2, H, generator=gen)

    split = S.MergedColumnParallelLinear(H, sizes, bias=False, params_dtype=torch.bfloat16,
                                         quant_config=qc, prefix="mlp.gate_up_proj")
    _load(split, "weight", gate, 0)
    _load(split, "weight", up, 1)
    split.quant_method.process_weights_after_loading(split)
    want = torch.cat([_expected_rows(cfg, x, w, None, rank * (n // tp), n // tp)
                      for w, n in ((gate, 128), (up, 64))], dim=1)
    assert_bits_equal(split(x)[0], want, "separate shards")

    fused = S.MergedColumnParallelLinear(H, sizes, bias=False, params_dtype=torch.bfloat16,
                                         quant_config=qc, prefix="mlp.gate_up_proj")
    both = torch.cat([gate, up])
    _load(fused, "weight", both)  # fused on disk: one tensor, no shard id
    fused.quant_method.process_weights_after_loading(fused)
    q, s = R.quantize_for(cfg, both.float())  # one checkpoint tensor, one set of scales
    yfull = R.linear_logical(x, q, s, None, cfg)
    cols = torch.cat([torch.arange(rank * 64, rank * 64 + 64),
                      128 + torch.arange(rank * 32, rank * 32 + 32)]) if tp == 2 else \
        torch.arange(192)
    assert_bits_equal(fused(x)[0], yfull[:, cols], "fused on disk")


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_row_parallel_shards(vllm, cfg):
    """Each rank holds a slice of the inputs; its weights and scales are the single-process
    ones (scales from the whole tensor), its output the reference on its slice; only rank 0
    adds the bias."""
    gen = torch.Generator().manual_seed(30)
    w = _checkpoint(gen, 40, 128, 0.5)
    b = torch.randn(40, generator=gen).to(torch.bfloat16)
    x = torch.randn(4, 128, generator=gen)
    q_full, s_full = R.quantize_for(cfg, w.float())
    for rank in range(2):
        S.TP.rank, S.TP.size = rank, 2
        qc = bv.BitgoConfig(bv.BitgoSettings(quant=cfg))
        layer = S.RowParallelLinear(128, 40, bias=True, params_dtype=torch.bfloat16,
                                    quant_config=qc, prefix="o_proj")
        _load(layer, "weight", w)
        layer.weight_loader(layer.bias, b)
        layer.quant_method.process_weights_after_loading(layer)
        cols = slice(64 * rank, 64 * rank + 64)
        s = s_full
        if cfg.scale_kind.value == "group":
            g = cfg.scale_group
            s = s_full.view(40, -1)[:, 64 * rank // g: (64 * rank + 64) // g].reshape(-1)
        got = R.unpack(cfg.format, 40, 64, layer.bitgo_packed)
        want_q = q_full[:, cols]
        if cfg.is_float:
            want_q = R.from_bf16_bits(R.bf16_bits(want_q))
            assert_bits_equal(got, want_q)
        else:
            assert torch.equal(got, want_q)
            assert_bits_equal(layer.bitgo_scales.data, s.reshape(-1))
        want = R.linear_logical(x[:, cols].contiguous(), q_full[:, cols].contiguous(),
                                None if cfg.is_float else s, b.float() if rank == 0 else None,
                                cfg)
        assert_bits_equal(layer(x[:, cols])[0], want, f"rank {rank}")


def test_row_parallel_sum_equals_single_process_when_segments_align(vllm):
    """With per-group activations whose groups are exactly the ranks' slices, the two ranks'
    partial results summed (the all-reduce) equal the single-process result bit for bit."""
    cfg = QuantConfig(format="int2", act="per-group:64", scale="group:64")
    gen = torch.Generator().manual_seed(31)
    w = _checkpoint(gen, 40, 128)
    x = torch.randn(3, 128, generator=gen)
    outs = []
    for tp, rank in ((1, 0), (2, 0), (2, 1)):
        S.TP.rank, S.TP.size = rank, tp
        layer = S.RowParallelLinear(128, 40, bias=False, params_dtype=torch.bfloat16,
                                    quant_config=bv.BitgoConfig(bv.BitgoSettings(quant=cfg)),
                                    prefix="down_proj")
        _load(layer, "weight", w)
        layer.quant_method.process_weights_after_loading(layer)
        k = 128 // tp
        outs.append(layer(x[:, rank * k:(rank + 1) * k].contiguous())[0])
    assert_bits_equal(outs[1] + outs[2], outs[0])


def test_group_scales_must_fit_the_rank_slice(vllm):
    S.TP.rank, S.TP.size = 0, 2
    qc = bv.BitgoConfig(bv.BitgoSettings(quant=QuantConfig(format="int8", scale="group:64")))
    with pytest.raises(ValueError, match="whole number of groups"):
        S.RowParallelLinear(192, 40, quant_config=qc, prefix="o_proj")


# --- BitNet checkpoints ----------------------------------------------------------------------


def bitnet_pack(w: torch.Tensor) -> torch.Tensor:
    """transformers' packing, written out for the test: row i*R + j of the ternary weight
    goes to packed row j, bits 2i..2i+1, as w+1."""
    rows = w.shape[0]
    r = (rows + 3) // 4
    codes = torch.zeros(4 * r, w.shape[1], dtype=torch.int32)
    codes[:rows] = w.to(torch.int32) + 1
    out = torch.zeros(r, w.shape[1], dtype=torch.int32)
    for i in range(4):
        out |= codes[i * r:(i + 1) * r] << (2 * i)
    return out.to(torch.uint8)


@pytest.mark.parametrize("rows", [1, 6, 7, 8, 33])
def test_bitnet_unpack(rows):
    gen = torch.Generator().manual_seed(rows)
    w = torch.randint(-1, 2, (rows, 10), generator=gen, dtype=torch.int8)
    assert torch.equal(bv.bitnet_unpack(bitnet_pack(w), rows), w)
    bad = bitnet_pack(w)
    bad[0, 3] |= 3
    with pytest.raises(ValueError, match="code 3 at row 0, input 3"):
        bv.bitnet_unpack(bad, rows)
    with pytest.raises(ValueError, match="uint8"):
        bv.bitnet_unpack(w, rows)


@pytest.mark.parametrize("linear_class", ["bitlinear", "autobitlinear"])
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 1)])
def test_bitnet_qkv_checkpoint(vllm, linear_class, tp, rank):
    S.TP.rank, S.TP.size = rank, tp
    gen = torch.Generator().manual_seed(40 + rank)
    qc = bv.BitgoConfig.from_config({"quant_method": "bitnet", "linear_class": linear_class})
    layer = S.QKVParallelLinear(H, HD, NH, NKV, bias=False, params_dtype=torch.bfloat16,
                                quant_config=qc, prefix="model.layers.0.self_attn.qkv_proj")
    x = torch.randn(2, H, generator=gen)
    parts = []
    cfg = QuantConfig(format="i2s", act="per-token", scale="tensor")
    for sid, rows, sc in (("q", NH * HD, 0.7), ("k", NKV * HD, 3.0), ("v", NKV * HD, 0.05)):
        wt = torch.randint(-1, 2, (rows, H), generator=gen, dtype=torch.int8)
        ws = torch.tensor([sc], dtype=torch.bfloat16)  # the checkpoint's weight_scale
        _load(layer, "weight", bitnet_pack(wt), sid)
        _load(layer, "weight_scale", ws, sid)
        s = ws.float()
        if linear_class == "bitlinear":
            s = torch.tensor(1.0) / s
        n = layer.num_heads * HD if sid == "q" else layer.num_kv_heads * HD
        part = rank if sid == "q" else rank // layer.num_kv_head_replicas
        y = R.linear_logical(x, wt, s, None, cfg)
        parts.append(y[:, part * n: part * n + n])
    layer.quant_method.process_weights_after_loading(layer)
    assert_bits_equal(layer(x)[0], torch.cat(parts, dim=1))


def test_bitnet_rows_not_a_multiple_of_four(vllm):
    qc = bv.BitgoConfig.from_config({"quant_method": "bitnet"})
    layer = S.ColumnParallelLinear(40, 6, bias=False, params_dtype=torch.bfloat16,
                                   quant_config=qc, prefix="proj")
    wt = torch.randint(-1, 2, (6, 40), dtype=torch.int8)
    _load(layer, "weight", bitnet_pack(wt))  # 2 packed rows hold 8, the last 2 are padding
    _load(layer, "weight_scale", torch.tensor(0.5, dtype=torch.bfloat16))
    layer.quant_method.process_weights_after_loading(layer)
    assert torch.equal(R.unpack("i2s", 6, 40, layer.bitgo_packed), wt)
    assert float(layer.bitgo_scales[0]) == 2.0


def test_apply_bias_handling(vllm):
    qc = bv.BitgoConfig()
    layer = S.ColumnParallelLinear(64, 32, bias=True, skip_bias_add=True,
                                   params_dtype=torch.bfloat16, quant_config=qc, prefix="p")
    _load(layer, "weight", torch.randn(32, 64).to(torch.bfloat16))
    layer.weight_loader(layer.bias, torch.randn(32).to(torch.bfloat16))
    layer.quant_method.process_weights_after_loading(layer)
    x = torch.randn(2, 64).to(torch.bfloat16)
    y, b = layer(x)  # skip_bias_add: the bias comes back separately
    assert b is layer.bias and y.dtype == torch.bfloat16
    with_bias = layer.quant_method.apply(layer, x, layer.bias)
    other = layer.quant_method.apply(layer, x, torch.ones(32))
    assert not torch.equal(y, with_bias) and not torch.equal(with_bias, other)
