"""The vLLM plugin: ``vllm serve MODEL --quantization bitgo``.

vLLM finds it through the entry point ``vllm.general_plugins: bitgo = bitgo.vllm:register``
and calls :func:`register` in every process it starts. ``register`` applies
``register_quantization_config("bitgo")`` to :class:`BitgoConfig`; its ``get_quant_method``
gives :class:`BitgoLinearMethod` to linear layers and the unquantized methods to skipped
layers (``lm_head``, embeddings, ``modules_to_not_convert``).

What a checkpoint holds, and how each is loaded:

* ``quant_method: "bitgo"`` (our schema, ``bitgo.QuantConfig``), or no quantization_config
  at all with ``--quantization bitgo`` (then ``BitgoConfig()``: i2s, per-token, per-tensor):
  float weights, quantized when loaded with the config's recipe (absmean ternarization for
  i2s/tl1/tl2, Go's ``kernels.QuantizeWeights`` for int2/int1/int8). The recipe's scales are
  computed from each *whole* checkpoint tensor as it is loaded (before vLLM narrows it to this
  rank's shard), so every tensor-parallel rank quantizes its rows exactly as a single process
  would.
* ``quant_method: "bitnet"`` (transformers' BitNet integration; claimed when the user asks
  for bitgo): ternary weights packed 4 per uint8 along out_features plus a per-tensor
  ``weight_scale`` (the inverse of the absmean scale for ``linear_class: bitlinear``, the
  scale itself for ``autobitlinear``); "online" checkpoints hold float weights and are
  ternarized as above. Imported as i2s, per-token activations, per-tensor scales.

Merged layers (QKV, gate/up) hold one logical weight per shard; per-tensor scales that
differ between shards become per-row scales (the same arithmetic, exactly). After loading,
``process_weights_after_loading`` packs the weights and registers the layer, and ``apply``
calls ``torch.ops.bitgo.linear``.

Every vLLM import is inside this module, and only inside functions: importing ``bitgo.vllm``
never needs vLLM; ``register()`` without vLLM logs and returns.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from . import _ops, reference
from .config import QuantConfig, ScaleKind

__all__ = ["register", "BitgoSettings", "parse_quantization_config", "bitnet_unpack",
           "is_layer_skipped", "BitgoConfig", "BitgoLinearMethod"]

logger = logging.getLogger(__name__)

NAME = "bitgo"


# ---------------------------------------------------------------------------------------------
# What the checkpoint says (no vLLM needed)


@dataclasses.dataclass(frozen=True)
class BitgoSettings:
    """The quantization of a checkpoint, in bitgo's terms.

    ``quant`` is the target layout; ``source`` says what the checkpoint's linear weights are:
    "float" (quantized at load), or "bitnet" (packed ternary uint8 + weight_scale).
    ``weight_scale_inverse``: a bitnet weight_scale is 1/s (bitlinear) rather than s."""

    quant: QuantConfig = QuantConfig()
    source: str = "float"
    weight_scale_inverse: bool = True


def parse_quantization_config(qc: Optional[Mapping[str, Any]]) -> BitgoSettings:
    """Read a config.json's quantization_config (``None``: a float checkpoint, defaults)."""
    if not qc:
        return BitgoSettings()
    if not isinstance(qc, Mapping):
        raise ValueError(f"quantization_config: want an object, got {type(qc).__name__}")
    method = str(qc.get("quant_method", "")).lower()
    if method == "bitgo":
        return BitgoSettings(quant=QuantConfig.from_dict(dict(qc)))
    if method == "bitnet":
        cls = str(qc.get("linear_class") or "bitlinear").lower()
        mode = str(qc.get("quantization_mode") or "offline").lower()
        if cls not in ("bitlinear", "autobitlinear"):
            raise ValueError(f"quantization_config (bitnet): linear_class {cls!r}: allowed: "
                             f"\"bitlinear\", \"autobitlinear\"")
        if mode not in ("offline", "online"):
            raise ValueError(f"quantization_config (bitnet): quantization_mode {mode!r}: "
                             f"allowed: \"offline\", \"online\"")
        skips = ["lm_head"] + [m for m in (qc.get("modules_to_not_convert") or [])
                               if m != "lm_head"]
        quant = QuantConfig(format="i2s", act="per-token", scale="tensor",
                            modules_to_not_convert=skips)
        return BitgoSettings(quant=quant, source="bitnet" if mode == "offline" else "float",
                             weight_scale_inverse=cls == "bitlinear")
    raise ValueError(f"quantization_config.quant_method {qc.get('quant_method')!r}: bitgo reads "
                     f"\"bitgo\" (its own schema) and \"bitnet\" (transformers BitNet "
                     f"checkpoints)")


def bitnet_unpack(packed: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor:
    """transformers' BitNet packing undone: a uint8 [R, K] tensor whose row j, bits 2i..2i+1,
    hold the code w+1 of output row i*R + j. Returns int8 ternary weights [rows, K] (rows
    defaults to 4R; the padding rows past it must be the last 3 or fewer)."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(f"bitnet weight: want a 2-D uint8 tensor (4 ternary values per byte), "
                         f"got {packed.dtype} of shape {tuple(packed.shape)}")
    r = packed.shape[0]
    p = packed.to(torch.int16)
    codes = torch.cat([(p >> (2 * i)) & 3 for i in range(4)], dim=0)  # row i*R + j
    if rows is None:
        rows = 4 * r
    if not 4 * r - 3 <= rows <= 4 * r:
        raise ValueError(f"bitnet weight: {r} packed rows hold {4 * r - 3}..{4 * r} output "
                         f"rows, the layer expects {rows}")
    codes = codes[:rows]
    if bool((codes == 3).any()):
        i = int((codes == 3).reshape(-1).nonzero()[0])
        raise ValueError(f"bitnet weight: code 3 at row {i // codes.shape[1]}, input "
                         f"{i % codes.shape[1]} (codes are w+1 in 0..2)")
    return (codes - 1).to(torch.int8)


def is_layer_skipped(prefix: str, skips: Sequence[str],
                     fused_mapping: Optional[Mapping[str, List[str]]] = None) -> bool:
    """Whether the layer named ``prefix`` stays unquantized: ``lm_head``, embeddings, and any
    name containing a ``skips`` fragment (transformers' rule). A fused layer (``qkv_proj`` in
    ``fused_mapping``) is skipped when its shards are; shards must agree."""
    leaf = prefix.rsplit(".", 1)[-1]

    def one(name: str) -> bool:
        last = name.rsplit(".", 1)[-1]
        return "lm_head" in name or "embed" in last or any(s in name for s in skips)

    if fused_mapping and leaf in fused_mapping:
        head = prefix[: len(prefix) - len(leaf)]
        verdicts = {one(head + shard) for shard in fused_mapping[leaf]}
        if len(verdicts) > 1:
            raise ValueError(f"layer {prefix}: some but not all of its shards "
                             f"{list(fused_mapping[leaf])} are in modules_to_not_convert; the "
                             f"shards of a fused layer must all be quantized or all be skipped")
        return verdicts.pop()
    return one(prefix)


def row_scales_from_shards(values: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Per-shard scales of a merged layer as per-row scales ([sum(sizes)] float32)."""
    return torch.cat([values[i].reshape(1).expand(n) for i, n in enumerate(sizes)]).float()


def _checkpoint_rows(layer, shard_id) -> Optional[int]:
    """Rows of the checkpoint tensor loaded for shard_id (None: unknown)."""
    if isinstance(shard_id, str):
        heads = {"q": getattr(layer, "total_num_heads", None),
                 "k": getattr(layer, "total_num_kv_heads", None),
                 "v": getattr(layer, "total_num_kv_heads", None)}[shard_id]
        size = getattr(layer, "v_head_size" if shard_id == "v" else "head_size", None)
        return heads * size if heads and size else None
    sizes = getattr(layer, "output_sizes", None)
    if isinstance(shard_id, int):
        return sizes[shard_id] if sizes else None
    if isinstance(shard_id, tuple):
        return sum(sizes[i] for i in shard_id) if sizes else None
    return getattr(layer, "output_size", None)


# ---------------------------------------------------------------------------------------------
# The layer state after loading (no vLLM needed)


def finalize_layer(layer: torch.nn.Module, cfg: QuantConfig, weights: torch.Tensor,
                   scales: Optional[torch.Tensor], name: str = "") -> None:
    """Pack logical weights [M, K] and their scales into ``layer`` for ``apply``: the
    parameters ``bitgo_packed`` (uint8), ``bitgo_scales`` (float32), ``bitgo_bias`` (a float32
    copy of ``layer.bias``, or None), and the attributes ``bitgo_spec`` and ``bitgo_handle``."""
    m, k = weights.shape
    cfg.check_shape(m, k, name=name)
    packed = reference.pack(cfg.format, weights)
    ns = cfg.num_scales(m, k)
    s = (torch.empty(0, dtype=torch.float32) if not ns
         else scales.detach().cpu().to(torch.float32).reshape(-1).contiguous())
    if s.numel() != ns:
        raise ValueError(f"layer {name}: {s.numel()} scales, want {ns} (scale {cfg.scale!r})")
    nn_ = torch.nn
    layer.register_parameter("bitgo_packed", nn_.Parameter(packed, requires_grad=False))
    layer.register_parameter("bitgo_scales", nn_.Parameter(s, requires_grad=False))
    bias = getattr(layer, "bias", None)
    b32 = None
    if bias is not None:
        b32 = nn_.Parameter(bias.detach().cpu().to(torch.float32).clone(), requires_grad=False)
    layer.register_parameter("bitgo_bias", b32)
    layer.bitgo_spec = cfg.spec(m, k)
    layer.bitgo_handle = 0
    layer.bitgo_config = cfg


def apply_layer(layer: torch.nn.Module, x: torch.Tensor,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """y = bitgo::linear(x) for a finalized layer; ``bias`` as vLLM passes it (the layer's own
    bias, None on tensor-parallel ranks > 0 or with skip_bias_add, or another tensor)."""
    if bias is None:
        b = None
    elif bias is getattr(layer, "bias", None) and layer.bitgo_bias is not None:
        b = layer.bitgo_bias
    else:
        b = bias.detach().to(torch.float32).contiguous()
    return _ops.linear(x.contiguous(), layer.bitgo_packed, layer.bitgo_scales, b,
                       layer.bitgo_spec, layer.bitgo_handle)


# ---------------------------------------------------------------------------------------------
# The vLLM classes, built on first use against the installed vLLM


_lock = threading.Lock()
_built: Dict[str, Any] = {}
_registered_with: Optional[Any] = None


def _build() -> Dict[str, Any]:
    with _lock:
        if _built:
            return _built
        from vllm.model_executor.layers.linear import (  # noqa: F401  (import check)
            LinearBase, LinearMethodBase, UnquantizedLinearMethod)
        from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
        from vllm.model_executor.parameter import (ChannelQuantScaleParameter,
                                                   GroupQuantScaleParameter,
                                                   ModelWeightParameter,
                                                   PerTensorScaleParameter)
        try:
            from vllm.model_executor.utils import set_weight_attrs
        except ImportError:  # pragma: no cover - very old vLLM
            def set_weight_attrs(weight, attrs):
                for k, v in (attrs or {}).items():
                    setattr(weight, k, v)

        class BitgoConfig(QuantizationConfig):
            """bitgo's quantization config for vLLM (see the module docstring)."""

            def __init__(self, settings: Optional[BitgoSettings] = None,
                         **quant_kwargs: Any) -> None:
                super().__init__()
                if settings is None:
                    settings = BitgoSettings(quant=QuantConfig(**quant_kwargs)) if quant_kwargs \
                        else BitgoSettings()
                elif quant_kwargs:
                    raise TypeError("BitgoConfig: give settings or QuantConfig fields, not both")
                self.settings = settings
                self.quant = settings.quant

            def __repr__(self) -> str:
                return (f"BitgoConfig(format={self.quant.format.value}, act={self.quant.act}, "
                        f"scale={self.quant.scale}, source={self.settings.source})")

            @classmethod
            def get_name(cls) -> str:
                return NAME

            @classmethod
            def get_supported_act_dtypes(cls) -> List[torch.dtype]:
                return [torch.bfloat16, torch.float16, torch.float32]

            @classmethod
            def get_min_capability(cls) -> int:
                # bitd computes on the CPU or an Intel GPU; no CUDA capability is needed.
                return 0

            @staticmethod
            def get_config_filenames() -> List[str]:
                # The settings come from config.json's quantization_config (vLLM reads it);
                # with none, vLLM calls BitgoConfig(): i2s on a float checkpoint.
                return []

            @classmethod
            def from_config(cls, config: Dict[str, Any]) -> "BitgoConfig":
                return cls(parse_quantization_config(config))

            @classmethod
            def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None,
                                             **kwargs) -> Optional[str]:
                method = str((hf_quant_cfg or {}).get("quant_method", "")).lower()
                if method == NAME:
                    return NAME
                if method == "bitnet" and user_quant == NAME:
                    return NAME  # BitNet checkpoints run on bitgo when the user asks for it
                return None

            def is_layer_skipped(self, prefix: str) -> bool:
                return is_layer_skipped(prefix, self.quant.modules_to_not_convert,
                                        getattr(self, "packed_modules_mapping", None))

            def get_quant_method(self, layer: torch.nn.Module, prefix: str):
                if isinstance(layer, LinearBase):
                    if self.is_layer_skipped(prefix):
                        return UnquantizedLinearMethod()
                    return BitgoLinearMethod(self, prefix)
                try:
                    from vllm.model_executor.layers.vocab_parallel_embedding import (
                        UnquantizedEmbeddingMethod, VocabParallelEmbedding)
                except ImportError:
                    return None
                if isinstance(layer, VocabParallelEmbedding):  # embeddings and lm_head
                    return UnquantizedEmbeddingMethod()
                return None

        class BitgoLinearMethod(LinearMethodBase):
            """Linear layers through bitd: float or BitNet-packed weights in vLLM's shard
            layout, packed after loading, computed by ``torch.ops.bitgo.linear``."""

            def __init__(self, quant_config: BitgoConfig, prefix: str = "") -> None:
                self.quant_config = quant_config
                self.prefix = prefix

            def create_weights(self, layer: torch.nn.Module, input_size_per_partition: int,
                               output_partition_sizes: List[int], input_size: int,
                               output_size: int, params_dtype: torch.dtype,
                               **extra_weight_attrs: Any) -> None:
                st = self.quant_config.settings
                cfg = st.quant
                weight_loader = extra_weight_attrs.pop("weight_loader")
                m, k = sum(output_partition_sizes), input_size_per_partition
                cfg.check_shape(m, k, name=self.prefix)
                layer.bitgo_partition_sizes = list(output_partition_sizes)
                layer.bitgo_input_size = input_size
                layer.bitgo_prefix = self.prefix
                if cfg.scale_kind is ScaleKind.GROUP and input_size != k and \
                        k % cfg.scale_group:
                    raise ValueError(f"layer {self.prefix}: scale {cfg.scale!r} needs this "
                                     f"rank's {k} inputs to be a whole number of groups")
                nshards = len(output_partition_sizes)

                if st.source == "bitnet":
                    def load_weight(param, loaded_weight, *args, **kwargs):
                        shard_id = args[0] if args else kwargs.get("loaded_shard_id")
                        if loaded_weight.dtype == torch.uint8:
                            loaded_weight = bitnet_unpack(
                                loaded_weight, _bitnet_rows(layer, shard_id, loaded_weight))
                        weight_loader(param, loaded_weight, *args, **kwargs)

                    weight = ModelWeightParameter(
                        data=torch.zeros(m, k, dtype=torch.int8), input_dim=1, output_dim=0,
                        weight_loader=load_weight)
                    scale = PerTensorScaleParameter(
                        data=torch.ones(nshards, dtype=torch.float32),
                        weight_loader=weight_loader)
                    layer.register_parameter("weight", weight)
                    layer.register_parameter("weight_scale", scale)
                    set_weight_attrs(weight, extra_weight_attrs)
                    set_weight_attrs(scale, extra_weight_attrs)
                    return

                # Float checkpoint: the weight, and the recipe's scales of every whole
                # checkpoint tensor, loaded through vLLM's own sharding.
                kind = cfg.scale_kind
                if kind is ScaleKind.TENSOR:
                    stat = PerTensorScaleParameter(
                        data=torch.ones(nshards, dtype=torch.float32),
                        weight_loader=weight_loader)
                elif kind is ScaleKind.ROW:
                    stat = ChannelQuantScaleParameter(
                        data=torch.ones(m, dtype=torch.float32), output_dim=0,
                        weight_loader=weight_loader)
                elif kind is ScaleKind.GROUP:
                    g = cfg.scale_group
                    stat = GroupQuantScaleParameter(
                        data=torch.ones(m, (k + g - 1) // g, dtype=torch.float32),
                        input_dim=1, output_dim=0, weight_loader=weight_loader)
                else:
                    stat = None

                def load_float(param, loaded_weight, *args, **kwargs):
                    weight_loader(param, loaded_weight, *args, **kwargs)
                    if stat is not None:
                        weight_loader(stat, _recipe_scales(cfg, loaded_weight), *args, **kwargs)

                weight = ModelWeightParameter(
                    data=torch.empty(m, k, dtype=params_dtype), input_dim=1, output_dim=0,
                    weight_loader=load_float)
                layer.register_parameter("weight", weight)
                set_weight_attrs(weight, extra_weight_attrs)
                if stat is not None:
                    layer.register_parameter("bitgo_recipe_scale", stat)
                    set_weight_attrs(stat, extra_weight_attrs)

            def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
                st = self.quant_config.settings
                cfg = st.quant
                sizes = layer.bitgo_partition_sizes
                w = layer.weight.data
                if st.source == "bitnet":
                    s = layer.weight_scale.data.to(torch.float32)
                    if st.weight_scale_inverse:
                        s = torch.tensor(1.0, dtype=torch.float32) / s
                    q, cfg_eff, scales = w.to(torch.int8), cfg, s
                    if getattr(layer, "bias", None) is not None and not st.weight_scale_inverse:
                        raise ValueError(f"layer {self.prefix}: autobitlinear checkpoints scale "
                                         f"the bias by weight_scale; layers with a bias are "
                                         f"not supported")
                    del layer.weight_scale
                else:
                    stat = getattr(layer, "bitgo_recipe_scale", None)
                    scales = None if stat is None else stat.data.to(torch.float32)
                    cfg_eff = cfg
                    q = w.to(torch.float32) if cfg.is_float else None  # else quantized below
                    if stat is not None:
                        del layer.bitgo_recipe_scale
                if cfg_eff.scale_kind is ScaleKind.TENSOR:
                    if len(sizes) > 1 and not bool((scales == scales[0]).all()):
                        # one scale per merged shard: the same arithmetic as per-row scales
                        cfg_eff = dataclasses.replace(cfg_eff, scale="row")
                        scales = row_scales_from_shards(scales, sizes)
                    else:
                        scales = scales[:1]
                elif scales is not None:
                    scales = scales.reshape(-1)
                if q is None:
                    q = reference.quantize_with_scales(cfg_eff, w.float(), scales)
                del layer.weight
                finalize_layer(layer, cfg_eff, q, scales, name=self.prefix)
                _register_layer(layer)

            def apply(self, layer: torch.nn.Module, x: torch.Tensor,
                      bias: Optional[torch.Tensor] = None) -> torch.Tensor:
                return apply_layer(layer, x, bias)

        def _bitnet_rows(layer, shard_id, loaded):
            rows = _checkpoint_rows(layer, shard_id)
            if rows is None or not 4 * loaded.shape[0] - 3 <= rows <= 4 * loaded.shape[0]:
                return None  # let vLLM's shape checks report it
            return rows

        _built.update(BitgoConfig=BitgoConfig, BitgoLinearMethod=BitgoLinearMethod)
        return _built


def _recipe_scales(cfg: QuantConfig, loaded_weight: torch.Tensor) -> torch.Tensor:
    """The recipe's scales of one whole checkpoint tensor, shaped like the scale parameter
    (tensor: [1]; row: [out]; group: [out, ceil(in/G)])."""
    w = loaded_weight.detach().to("cpu", torch.float32)
    s = reference.weight_scales(cfg, w)
    if cfg.scale_kind is ScaleKind.GROUP:
        return s.view(w.shape[0], -1)
    return s


def _register_layer(layer: torch.nn.Module) -> None:
    """Hook for registering a finalized layer with bitd (until then, the reference runs it)."""


def __getattr__(name: str):
    if name in ("BitgoConfig", "BitgoLinearMethod"):
        return _build()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """Register bitgo with vLLM (the ``vllm.general_plugins`` entry point). Safe to call any
    number of times; without vLLM installed it logs and returns."""
    global _registered_with
    try:
        import vllm.model_executor.layers.quantization as vq
        from vllm.model_executor.layers import linear as vl
    except ImportError as e:
        logger.info("bitgo: vLLM is not installed (%s); quantization method %r not registered",
                    e, NAME)
        return
    cls = _build()["BitgoConfig"]
    with _lock:
        if _registered_with is vq:
            return
        current = getattr(vq, "_CUSTOMIZED_METHOD_TO_QUANT_CONFIG", {}).get(NAME)
        if current is not cls:
            try:
                vq.register_quantization_config(NAME)(cls)
            except ValueError as e:  # older vLLM refuses a second registration
                logger.warning("bitgo: vLLM already has a quantization method %r (%s); kept it",
                               NAME, e)
        supported = getattr(vl, "WEIGHT_LOADER_V2_SUPPORTED", None)
        if supported is not None and "BitgoLinearMethod" not in supported:
            supported.append("BitgoLinearMethod")
        _registered_with = vq
    logger.info("bitgo: registered quantization method %r with vLLM", NAME)
