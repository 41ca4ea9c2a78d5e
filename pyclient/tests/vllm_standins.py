"""STAND-INS FOR vLLM, FOR TESTS ONLY. vLLM cannot be installed here, so these few classes
imitate the parts of vLLM that bitgo.vllm touches, with the signatures and behaviour of vLLM's
own (read from vllm/model_executor/layers/quantization/{__init__,base_config}.py,
layers/linear.py, model_executor/parameter.py, layers/vocab_parallel_embedding.py,
model_executor/utils.py): the quantization-method registry, QuantizationConfig /
QuantizeMethodBase / LinearMethodBase, the v2 weight-loader parameters and the linear layers'
weight_loader_v2 shard arithmetic (column, merged column, QKV with replicated KV heads, row),
and the vocabulary embedding. They are written for these tests (not copied), cover only what
the tests exercise, and are installed into sys.modules by the `vllm` fixture; bitgo itself
never imports them.
"""

import abc
import sys
import types
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch.nn import Parameter


class TP:
    """The tensor-parallel rank and size the stand-in layers and parameters see."""

    rank = 0
    size = 1


def get_tensor_model_parallel_rank() -> int:
    return TP.rank


def get_tensor_model_parallel_world_size() -> int:
    return TP.size


def divide(numerator: int, denominator: int) -> int:
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
    return numerator // denominator


def set_weight_attrs(weight, weight_attrs: Optional[Dict[str, Any]]) -> None:
    if weight_attrs is None:
        return
    for key, value in weight_attrs.items():
        assert not hasattr(weight, key), f"overwriting existing tensor attribute: {key}"
        setattr(weight, key, value)


# --- vllm.model_executor.parameter ---------------------------------------------------------


class BasevLLMParameter(Parameter):
    def __new__(cls, data, **kwargs):
        return super().__new__(cls, data=data, requires_grad=False)

    def __init__(self, data, weight_loader):
        self._weight_loader = weight_loader
        self.tp_rank = get_tensor_model_parallel_rank()
        self.tp_size = get_tensor_model_parallel_world_size()

    @property
    def weight_loader(self):
        return self._weight_loader

    def _copy_checked(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        scalar = dst.dim() == 1 and dst.numel() == 1 and src.dim() == 0
        assert dst.shape == src.shape or scalar, f"{tuple(dst.shape)} vs {tuple(src.shape)}"
        dst.copy_(src)

    def load_column_parallel_weight(self, loaded_weight):
        self._copy_checked(self.data, loaded_weight)

    def load_row_parallel_weight(self, loaded_weight):
        self._copy_checked(self.data, loaded_weight)

    def load_merged_column_weight(self, loaded_weight, **kwargs):
        self._copy_checked(self.data, loaded_weight)

    def load_qkv_weight(self, loaded_weight, **kwargs):
        self._copy_checked(self.data, loaded_weight)

    def _shard_id_as_int(self, shard_id):
        return shard_id if isinstance(shard_id, int) else {"q": 0, "k": 1, "v": 2}[shard_id]


class _ColumnvLLMParameter(BasevLLMParameter):
    def __init__(self, output_dim: int, **kwargs):
        self._output_dim = output_dim
        super().__init__(**kwargs)

    @property
    def output_dim(self):
        return self._output_dim

    def load_column_parallel_weight(self, loaded_weight):
        n = self.data.shape[self.output_dim]
        self._copy_checked(self.data, loaded_weight.narrow(self.output_dim, self.tp_rank * n, n))

    def load_merged_column_weight(self, loaded_weight, **kwargs):
        off, n = kwargs["shard_offset"], kwargs["shard_size"]
        dst = self.data.narrow(self.output_dim, off, n)
        self._copy_checked(dst, loaded_weight.narrow(self.output_dim, self.tp_rank * n, n))

    def load_qkv_weight(self, loaded_weight, **kwargs):
        off, n = kwargs["shard_offset"], kwargs["shard_size"]
        sid, replicas = kwargs["shard_id"], kwargs["num_heads"]
        part = self.tp_rank if sid == "q" else self.tp_rank // replicas
        dst = self.data.narrow(self.output_dim, off, n)
        self._copy_checked(dst, loaded_weight.narrow(self.output_dim, part * n, n))


class RowvLLMParameter(BasevLLMParameter):
    def __init__(self, input_dim: int, **kwargs):
        self._input_dim = input_dim
        super().__init__(**kwargs)

    @property
    def input_dim(self):
        return self._input_dim

    def load_row_parallel_weight(self, loaded_weight):
        n = self.data.shape[self.input_dim]
        w = loaded_weight.narrow(self.input_dim, self.tp_rank * n, n)
        if w.dim() == 0:
            w = w.reshape(1)
        self._copy_checked(self.data, w)


class ModelWeightParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class GroupQuantScaleParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class ChannelQuantScaleParameter(_ColumnvLLMParameter):
    pass


class PerTensorScaleParameter(BasevLLMParameter):
    def load_merged_column_weight(self, loaded_weight, **kwargs):
        self._load_into_shard_id(loaded_weight, **kwargs)

    def load_qkv_weight(self, loaded_weight, **kwargs):
        self._load_into_shard_id(loaded_weight, **kwargs)

    def load_column_parallel_weight(self, loaded_weight):
        self.load_row_parallel_weight(loaded_weight)

    def _load_into_shard_id(self, loaded_weight, shard_id, **kwargs):
        i = self._shard_id_as_int(shard_id)
        if loaded_weight.dim() != 0:
            assert loaded_weight.shape[0] == 1
            loaded_weight = loaded_weight[0]
        self._copy_checked(self.data[i], loaded_weight)


# --- vllm.model_executor.layers.quantization.base_config -----------------------------------


class QuantizeMethodBase(abc.ABC):
    @abc.abstractmethod
    def create_weights(self, layer, *weight_args, **extra_weight_attrs):
        raise NotImplementedError

    @abc.abstractmethod
    def apply(self, layer, *args, **kwargs):
        raise NotImplementedError

    def process_weights_after_loading(self, layer) -> None:
        return


class QuantizationConfig(abc.ABC):
    def __init__(self):
        super().__init__()
        self.packed_modules_mapping: Dict[str, List[str]] = dict()

    @abc.abstractmethod
    def get_name(self):
        raise NotImplementedError

    @abc.abstractmethod
    def get_supported_act_dtypes(self):
        raise NotImplementedError

    @classmethod
    @abc.abstractmethod
    def get_min_capability(cls) -> int:
        raise NotImplementedError

    @staticmethod
    @abc.abstractmethod
    def get_config_filenames() -> List[str]:
        raise NotImplementedError

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config):
        raise NotImplementedError

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None):
        return None

    @abc.abstractmethod
    def get_quant_method(self, layer, prefix):
        raise NotImplementedError


# --- vllm.model_executor.layers.quantization ----------------------------------------------


class Registry:
    """The module-level state of vllm.model_executor.layers.quantization."""

    def __init__(self, strict: bool):
        self.methods: List[str] = ["awq", "fp8", "gptq"]
        self.custom: Dict[str, type] = {}
        self.strict = strict  # older vLLM raised on a second registration of a name
        self.warnings: List[str] = []

    def register_quantization_config(self, quantization: str):
        def wrapper(cls):
            if quantization in self.methods:
                if self.strict:
                    raise ValueError(f"The quantization method `{quantization}` is already exists.")
                self.warnings.append(f"{quantization} overwritten by {cls}")
            else:
                self.methods.append(quantization)
            if not issubclass(cls, QuantizationConfig):
                raise ValueError("The quantization config must be a subclass of "
                                 "`QuantizationConfig`.")
            self.custom[quantization] = cls
            return cls
        return wrapper

    def get_quantization_config(self, quantization: str):
        if quantization not in self.methods:
            raise ValueError(f"Invalid quantization method: {quantization}")
        return self.custom[quantization]


# --- vllm.model_executor.layers.linear -----------------------------------------------------

WEIGHT_LOADER_V2_SUPPORTED = ["UnquantizedLinearMethod", "Fp8LinearMethod"]


class LinearMethodBase(QuantizeMethodBase):
    @abc.abstractmethod
    def create_weights(self, layer, input_size_per_partition, output_partition_sizes,
                       input_size, output_size, params_dtype, **extra_weight_attrs):
        raise NotImplementedError

    @abc.abstractmethod
    def apply(self, layer, x, bias=None):
        raise NotImplementedError


class UnquantizedLinearMethod(LinearMethodBase):
    def create_weights(self, layer, input_size_per_partition, output_partition_sizes,
                       input_size, output_size, params_dtype, **extra_weight_attrs):
        loader = extra_weight_attrs.pop("weight_loader")
        w = ModelWeightParameter(data=torch.empty(sum(output_partition_sizes),
                                                  input_size_per_partition, dtype=params_dtype),
                                 input_dim=1, output_dim=0, weight_loader=loader)
        layer.register_parameter("weight", w)
        set_weight_attrs(w, extra_weight_attrs)

    def apply(self, layer, x, bias=None):
        return F.linear(x, layer.weight, bias)


class LinearBase(torch.nn.Module):
    def __init__(self, input_size, output_size, bias=False, skip_bias_add=False,
                 params_dtype=None, quant_config=None, prefix="", *, return_bias=True,
                 disable_tp=False):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        self.skip_bias_add = skip_bias_add
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.quant_config, self.prefix = quant_config, prefix
        if quant_config is None:
            self.quant_method = UnquantizedLinearMethod()
        else:
            self.quant_method = quant_config.get_quant_method(self, prefix=prefix)
            if self.quant_method is None:
                raise ValueError("All linear layers should support quant method.")
        self.return_bias = return_bias
        self.tp_rank, self.tp_size = (0, 1) if disable_tp else (TP.rank, TP.size)

    def _loader(self):
        supported = sys.modules["vllm.model_executor.layers.linear"].WEIGHT_LOADER_V2_SUPPORTED
        v2 = self.quant_method.__class__.__name__ in supported
        return self.weight_loader_v2 if v2 else self.weight_loader

    def _make_bias(self, bias, n, dtype):
        if bias:
            self.bias = Parameter(torch.zeros(n, dtype=dtype), requires_grad=False)
            set_weight_attrs(self.bias, {"output_dim": 0, "weight_loader": self.weight_loader})
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        bias = None if self.skip_bias_add else self.bias
        out = self.quant_method.apply(self, x, bias)
        return (out, self.bias if self.skip_bias_add else None) if self.return_bias else out


class ColumnParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, gather_output=False,
                 skip_bias_add=False, params_dtype=None, quant_config=None, prefix="", *,
                 return_bias=True, disable_tp=False):
        tp = 1 if disable_tp else TP.size
        self.input_size_per_partition = input_size
        self.output_size_per_partition = divide(output_size, tp)
        self.output_partition_sizes = [self.output_size_per_partition]
        if hasattr(self, "output_sizes"):
            self.output_partition_sizes = [divide(n, tp) for n in self.output_sizes]
        super().__init__(input_size, output_size, bias, skip_bias_add, params_dtype,
                         quant_config, prefix, return_bias=return_bias, disable_tp=disable_tp)
        self.quant_method.create_weights(
            layer=self, input_size_per_partition=self.input_size_per_partition,
            output_partition_sizes=self.output_partition_sizes, input_size=self.input_size,
            output_size=self.output_size, params_dtype=self.params_dtype,
            weight_loader=self._loader())
        self._make_bias(bias, self.output_size_per_partition, self.params_dtype)

    def weight_loader(self, param, loaded_weight):  # v1 (the bias)
        d = getattr(param, "output_dim", None)
        if d is not None:
            n = param.data.shape[d]
            loaded_weight = loaded_weight.narrow(d, self.tp_rank * n, n)
        if loaded_weight.dim() == 0:
            loaded_weight = loaded_weight.reshape(1)
        assert param.data.shape == loaded_weight.shape
        param.data.copy_(loaded_weight)

    def weight_loader_v2(self, param, loaded_weight):
        if loaded_weight.dim() == 0:
            loaded_weight = loaded_weight.reshape(1)
        param.load_column_parallel_weight(loaded_weight=loaded_weight)


class MergedColumnParallelLinear(ColumnParallelLinear):
    def __init__(self, input_size, output_sizes, bias=True, gather_output=False,
                 skip_bias_add=False, params_dtype=None, quant_config=None, prefix="", *,
                 return_bias=True, disable_tp=False):
        self.output_sizes = output_sizes
        super().__init__(input_size, sum(output_sizes), bias, gather_output, skip_bias_add,
                         params_dtype, quant_config, prefix, return_bias=return_bias,
                         disable_tp=disable_tp)

    def weight_loader_v2(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:  # fused on disk
            if isinstance(param, PerTensorScaleParameter):
                for i in range(param.data.shape[0]):
                    param.load_merged_column_weight(loaded_weight=loaded_weight, shard_id=i)
                return
            off = 0
            for i, n in enumerate(self.output_sizes):
                self.weight_loader_v2(param, loaded_weight.narrow(param.output_dim, off, n), i)
                off += n
            return
        off = sum(self.output_sizes[:loaded_shard_id]) // self.tp_size
        n = self.output_sizes[loaded_shard_id] // self.tp_size
        param.load_merged_column_weight(loaded_weight=loaded_weight, shard_id=loaded_shard_id,
                                        shard_offset=off, shard_size=n)


class QKVParallelLinear(ColumnParallelLinear):
    def __init__(self, hidden_size, head_size, total_num_heads, total_num_kv_heads=None,
                 bias=True, skip_bias_add=False, params_dtype=None, quant_config=None,
                 prefix="", *, return_bias=True, disable_tp=False):
        self.hidden_size, self.head_size, self.v_head_size = hidden_size, head_size, head_size
        self.total_num_heads = total_num_heads
        self.total_num_kv_heads = total_num_kv_heads or total_num_heads
        tp = 1 if disable_tp else TP.size
        self.num_heads = divide(total_num_heads, tp)
        if tp >= self.total_num_kv_heads:
            self.num_kv_heads, self.num_kv_head_replicas = 1, divide(tp, self.total_num_kv_heads)
        else:
            self.num_kv_heads, self.num_kv_head_replicas = divide(self.total_num_kv_heads, tp), 1
        self.output_sizes = [self.num_heads * head_size * tp, self.num_kv_heads * head_size * tp,
                             self.num_kv_heads * head_size * tp]
        super().__init__(hidden_size, sum(self.output_sizes), bias, False, skip_bias_add,
                         params_dtype, quant_config, prefix, return_bias=return_bias,
                         disable_tp=disable_tp)

    def _offset_size(self, sid):
        h, nq, nkv = self.head_size, self.num_heads, self.num_kv_heads
        return {"q": (0, nq * h), "k": (nq * h, nkv * h), "v": ((nq + nkv) * h, nkv * h)}[sid]

    def weight_loader_v2(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:
            if isinstance(param, PerTensorScaleParameter):
                for i in range(param.data.shape[0]):
                    param.load_qkv_weight(loaded_weight=loaded_weight, shard_id=i)
                return
            h = self.head_size
            parts = [("q", 0, self.total_num_heads * h),
                     ("k", self.total_num_heads * h, self.total_num_kv_heads * h),
                     ("v", (self.total_num_heads + self.total_num_kv_heads) * h,
                      self.total_num_kv_heads * h)]
            for sid, off, n in parts:
                self.weight_loader_v2(param, loaded_weight.narrow(param.output_dim, off, n), sid)
            return
        off, n = self._offset_size(loaded_shard_id)
        param.load_qkv_weight(loaded_weight=loaded_weight, num_heads=self.num_kv_head_replicas,
                              shard_id=loaded_shard_id, shard_offset=off, shard_size=n)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):  # v1 (the bias)
        off, n = self._offset_size(loaded_shard_id)
        part = self.tp_rank if loaded_shard_id == "q" else \
            self.tp_rank // self.num_kv_head_replicas
        param.data.narrow(0, off, n).copy_(loaded_weight.narrow(0, part * n, n))


class RowParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, input_is_parallel=True,
                 skip_bias_add=False, params_dtype=None, reduce_results=True,
                 quant_config=None, prefix="", *, return_bias=True, disable_tp=False):
        tp = 1 if disable_tp else TP.size
        self.input_size_per_partition = divide(input_size, tp)
        self.output_size_per_partition = output_size
        self.output_partition_sizes = [output_size]
        super().__init__(input_size, output_size, bias, skip_bias_add, params_dtype,
                         quant_config, prefix, return_bias=return_bias, disable_tp=disable_tp)
        self.quant_method.create_weights(
            layer=self, input_size_per_partition=self.input_size_per_partition,
            output_partition_sizes=self.output_partition_sizes, input_size=self.input_size,
            output_size=self.output_size, params_dtype=self.params_dtype,
            weight_loader=self._loader())
        self._make_bias(bias, output_size, self.params_dtype)

    def weight_loader(self, param, loaded_weight):  # v1 (the bias: not sharded)
        d = getattr(param, "input_dim", None)
        if d is not None:
            n = param.data.shape[d]
            loaded_weight = loaded_weight.narrow(d, self.tp_rank * n, n)
        if loaded_weight.dim() == 0:
            loaded_weight = loaded_weight.reshape(1)
        param.data.copy_(loaded_weight)

    def weight_loader_v2(self, param, loaded_weight):
        if loaded_weight.dim() == 0:
            loaded_weight = loaded_weight.reshape(1)
        param.load_row_parallel_weight(loaded_weight=loaded_weight)

    def forward(self, x):
        # only rank 0 adds the bias; the all-reduce is the caller's (the tests sum the ranks)
        bias = None if (self.tp_rank > 0 or self.skip_bias_add) else self.bias
        out = self.quant_method.apply(self, x, bias)
        return (out, self.bias if self.skip_bias_add else None) if self.return_bias else out


# --- vllm.model_executor.layers.vocab_parallel_embedding ----------------------------------


class UnquantizedEmbeddingMethod(QuantizeMethodBase):
    def create_weights(self, layer, *weight_args, **extra_weight_attrs):
        pass

    def apply(self, layer, x, bias=None):
        return F.linear(x, layer.weight, bias)


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, num_embeddings, embedding_dim, params_dtype=None, quant_config=None,
                 prefix=""):
        super().__init__()
        method = None
        if quant_config is not None:
            method = quant_config.get_quant_method(self, prefix=prefix)
        self.quant_method = method or UnquantizedEmbeddingMethod()


class ParallelLMHead(VocabParallelEmbedding):
    pass


# --- installing them -----------------------------------------------------------------------


def install(monkeypatch, strict_registry: bool = False) -> types.SimpleNamespace:
    """Put a `vllm` package made of these stand-ins into sys.modules (undone by monkeypatch)."""
    reg = Registry(strict_registry)

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    mod("vllm")
    mod("vllm.distributed", get_tensor_model_parallel_rank=get_tensor_model_parallel_rank,
        get_tensor_model_parallel_world_size=get_tensor_model_parallel_world_size, divide=divide)
    mod("vllm.model_executor")
    mod("vllm.model_executor.utils", set_weight_attrs=set_weight_attrs)
    mod("vllm.model_executor.parameter", BasevLLMParameter=BasevLLMParameter,
        ModelWeightParameter=ModelWeightParameter, RowvLLMParameter=RowvLLMParameter,
        PerTensorScaleParameter=PerTensorScaleParameter,
        ChannelQuantScaleParameter=ChannelQuantScaleParameter,
        GroupQuantScaleParameter=GroupQuantScaleParameter)
    mod("vllm.model_executor.layers")
    mod("vllm.model_executor.layers.quantization.base_config",
        QuantizationConfig=QuantizationConfig, QuantizeMethodBase=QuantizeMethodBase)
    q = mod("vllm.model_executor.layers.quantization", QUANTIZATION_METHODS=reg.methods,
            _CUSTOMIZED_METHOD_TO_QUANT_CONFIG=reg.custom,
            register_quantization_config=reg.register_quantization_config,
            get_quantization_config=reg.get_quantization_config,
            QuantizationConfig=QuantizationConfig)
    lin = mod("vllm.model_executor.layers.linear", LinearBase=LinearBase,
              LinearMethodBase=LinearMethodBase, UnquantizedLinearMethod=UnquantizedLinearMethod,
              WEIGHT_LOADER_V2_SUPPORTED=list(WEIGHT_LOADER_V2_SUPPORTED),
              ColumnParallelLinear=ColumnParallelLinear,
              MergedColumnParallelLinear=MergedColumnParallelLinear,
              QKVParallelLinear=QKVParallelLinear, RowParallelLinear=RowParallelLinear)
    sys.modules["vllm.model_executor.layers"].linear = lin
    sys.modules["vllm.model_executor.layers"].quantization = q
    mod("vllm.model_executor.layers.vocab_parallel_embedding",
        VocabParallelEmbedding=VocabParallelEmbedding, ParallelLMHead=ParallelLMHead,
        UnquantizedEmbeddingMethod=UnquantizedEmbeddingMethod)
    TP.rank, TP.size = 0, 1
    return types.SimpleNamespace(registry=reg, quantization=q, linear=lin, TP=TP)
