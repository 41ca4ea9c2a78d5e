"""``BitLinear``, a drop-in replacement for ``torch.nn.Linear`` that computes with packed
low-bit weights, and ``quantize_``, which swaps a model's linear layers for it in place."""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch
from torch import nn

from . import _ops, backend, reference
from .config import QuantConfig

__all__ = ["BitLinear", "quantize_", "default_filter", "LinearTimer"]


class LinearTimer:
    """Wall time spent in ``BitLinear.forward`` while it is active (a context manager; one
    at a time, process-wide): ``calls`` and ``ns``. For measurements such as the share of a
    model's time that goes to its linear layers."""

    def __init__(self) -> None:
        self.calls = 0
        self.ns = 0

    def __enter__(self) -> "LinearTimer":
        global _timer
        _timer = self
        return self

    def __exit__(self, *exc) -> None:
        global _timer
        _timer = None


_timer: Optional[LinearTimer] = None
_now = time.perf_counter_ns
_OP = torch.ops.bitgo.linear.default
_compiler = getattr(torch, "compiler", None)
_is_compiling = getattr(_compiler, "is_compiling", None) or (lambda: False)


_LAYOUT_UNNAMED = "kernels/3"
"""The layout revision of BitLinear states that name none: those saved before kernels/4."""


class BitLinear(nn.Module):
    """y = x W^T + b with W stored packed in a bitgo format (see :class:`bitgo.Format`).

    Same constructor and attributes as ``nn.Linear`` (``in_features``, ``out_features``,
    ``weight``, ``bias``), plus ``config``. Constructed directly, it initialises float weights
    as ``nn.Linear`` does and quantizes them with the config's recipe; usually it is made with
    :meth:`from_linear` or :func:`bitgo.quantize_`.

    State: ``packed`` (uint8 blob in the format's layout), ``scales`` (float32) and ``bias``
    (float32, or None) are what ``state_dict`` holds, with the config and shape in its extra
    state (loading into a layer with another config or shape is refused). ``weight`` is the
    dequantized float32 [out, in] matrix, computed on access for inspection; the layer never
    computes with it. Casting the module (``.to(torch.bfloat16)``, ``.half()``) leaves the
    float32 scales and bias alone: the epilogue is float32 by definition.

    Inputs are [..., in_features] float32/bfloat16/float16 on the CPU; outputs have the input's
    dtype. The call is the operator ``torch.ops.bitgo.linear``.

    Where it computes: with the ``"bitd"`` backend (the default, see :mod:`bitgo.backend`) the
    packed weights are registered with bitd whenever they are set (through
    :func:`bitgo.client.default_client`, which starts a private daemon if none is running)
    and every forward is one call to bitd; ``handle`` is the registration's op handle. With
    the ``"reference"`` backend, ``handle`` stays 0 and ``bitgo.reference`` computes. The
    result is the same bit for bit. :meth:`attach` registers with a given client; in-place
    edits of ``packed``/``scales``/``bias`` need :meth:`attach` again to reach bitd.
    """

    __constants__ = ["in_features", "out_features"]

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None, *, config: Optional[QuantConfig] = None) -> None:
        super().__init__()
        if config is None:
            config = QuantConfig()
        if not isinstance(config, QuantConfig):
            raise TypeError(f"config: want a bitgo.QuantConfig, got {type(config).__name__}")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device {device}: BitLinear keeps its packed weights on the CPU "
                             f"(bitd owns the compute device)")
        config.check_shape(out_features, in_features)
        self.in_features = in_features
        self.out_features = out_features
        self.config = config
        self._spec = config.spec(out_features, in_features)
        self.handle = 0  # the layer's registration with a bitd client; 0: bitgo.reference
        self._remote = None
        lay = reference.layout(config.format, out_features, in_features)
        self.register_buffer("packed", torch.zeros(lay.nbytes, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(config.num_scales(out_features, in_features),
                                                  dtype=torch.float32))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=torch.float32),
                                     requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(dtype)

    def reset_parameters(self, dtype=None) -> None:
        """nn.Linear's initialisation (Kaiming uniform weights, uniform bias), quantized."""
        w = torch.empty((self.out_features, self.in_features), dtype=dtype or torch.float32)
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        b = None
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            b = torch.empty(self.out_features).uniform_(-bound, bound)
        self.set_weights(w, b)

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: Optional[QuantConfig] = None) -> "BitLinear":
        """A BitLinear computing ``linear`` quantized by ``config``'s recipe: ternary formats
        by absmean (s = mean|W| floored at 1e-5, W_t = clamp(round(W/s), -1, 1), per tensor or
        per row), int8/int2/int1 by Go's ``kernels.QuantizeWeights``, bf16/f32 as is. The bias
        is kept in float32."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear: want an nn.Linear, got {type(linear).__name__}")
        config = config if config is not None else QuantConfig()
        if linear.weight.device.type == "meta":
            raise ValueError("from_linear: the linear layer's weights are on the meta device "
                             "(not loaded yet)")
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        config.check_shape(linear.out_features, linear.in_features)
        new.in_features, new.out_features, new.config = (linear.in_features,
                                                        linear.out_features, config)
        new._spec = config.spec(linear.out_features, linear.in_features)
        new.handle = 0
        new._remote = None
        lay = reference.layout(config.format, linear.out_features, linear.in_features)
        new.register_buffer("packed", torch.zeros(lay.nbytes, dtype=torch.uint8))
        new.register_buffer("scales", torch.ones(
            config.num_scales(linear.out_features, linear.in_features), dtype=torch.float32))
        if linear.bias is not None:
            new.bias = nn.Parameter(torch.zeros(linear.out_features, dtype=torch.float32),
                                    requires_grad=False)
        else:
            new.register_parameter("bias", None)
        new.set_weights(linear.weight.detach(), None if linear.bias is None
                        else linear.bias.detach())
        new.train(linear.training)
        return new

    # -- weights ------------------------------------------------------------------------------

    def set_weights(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        """Quantize float weights [out, in] with the config's recipe and store them packed."""
        self._check_weight_shape(weight)
        q, s = reference.quantize_for(self.config, weight.detach().cpu())
        self.set_logical(q, s, bias)

    def set_logical(self, weights: torch.Tensor, scales: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor] = None) -> None:
        """Store already-quantized logical weights (see ``bitgo.reference.pack``), their
        float32 scales and the bias."""
        self._check_weight_shape(weights)
        packed = reference.pack(self.config.format, weights)
        ns = self.config.num_scales(self.out_features, self.in_features)
        if ns:
            if scales is None or scales.numel() != ns:
                raise ValueError(f"scales: want {ns} values for scale {self.config.scale!r} "
                                 f"({self.out_features}x{self.in_features}), got "
                                 f"{None if scales is None else scales.numel()}")
            scales = scales.detach().cpu().to(torch.float32).reshape(-1)
            fin = torch.isfinite(scales)
            if not bool(fin.all()):
                i = int((~fin).nonzero()[0])
                raise ValueError(f"scale {i} is {float(scales[i])}: not finite")
        else:
            scales = torch.empty(0, dtype=torch.float32)
        if bias is not None:
            if self.bias is None:
                raise ValueError("bias given for a BitLinear made with bias=False")
            if bias.numel() != self.out_features:
                raise ValueError(f"bias has {bias.numel()} values, want out_features = "
                                 f"{self.out_features}")
            b = bias.detach().cpu().to(torch.float32).reshape(-1)
            fin = torch.isfinite(b)
            if not bool(fin.all()):
                i = int((~fin).nonzero()[0])
                raise ValueError(f"bias {i} is {float(b[i])}: not finite")
            self.bias.data = b.clone()
        elif self.bias is not None:
            self.bias.data = torch.zeros(self.out_features, dtype=torch.float32)
        self._buffers["packed"] = packed
        self._buffers["scales"] = scales.clone()
        self._weights_changed()

    def _check_weight_shape(self, w: torch.Tensor) -> None:
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"weights: want a torch.Tensor, got {type(w).__name__}")
        if tuple(w.shape) != (self.out_features, self.in_features):
            raise ValueError(f"weights have shape {tuple(w.shape)}, want (out_features, "
                             f"in_features) = ({self.out_features}, {self.in_features})")

    def _weights_changed(self) -> None:
        """The packed weights, scales or bias changed: drop the registration and, with the
        bitd backend, register the new weights."""
        self.detach()
        if backend.get_backend() == "bitd":
            self.attach()

    def attach(self, client=None, name: str = "") -> None:
        """Register the packed weights with bitd (``client``, default the process's shared
        client) and compute through it from now on."""
        if client is None:
            from .client import default_client
            client = default_client()
        self.detach()
        self._remote = backend.RemoteLayer(client, self.config, self.out_features,
                                           self.in_features, self.packed, self.scales,
                                           self.bias, name=name)
        self.handle = self._remote.handle

    def detach(self) -> None:
        """Free the registration with bitd (if any); ``bitgo.reference`` computes until the
        next :meth:`attach`."""
        r = self.__dict__.get("_remote")
        self._remote = None
        self.handle = 0
        if r is not None:
            r.close()

    @property
    def remote(self):
        """The :class:`bitgo.backend.RemoteLayer` this layer computes with, or None."""
        return self._remote

    def __getstate__(self):
        # copies and pickles hold no registration: they register again on first use
        state = super().__getstate__() if hasattr(super(), "__getstate__") else None
        state = dict(self.__dict__ if state is None else state)
        state["_remote"] = None
        state["handle"] = 0
        return state

    def logical_weights(self) -> torch.Tensor:
        """The logical weights [out, in] (int8 codes/values, or float32 for float formats)."""
        return reference.unpack(self.config.format, self.out_features, self.in_features,
                                self.packed)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized weights (level * scale), float32 [out_features, in_features]."""
        return reference.dequantize(self.config, self.logical_weights(),
                                    self.scales if self.scales.numel() else None)

    # -- forward ------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"BitLinear: input must be a torch.Tensor, got {type(x).__name__}")
        # the shape, dtype and device are checked by the op (bitgo::linear: ...)
        if self.handle == 0 and self._remote is None and backend.get_backend() == "bitd":
            self.attach()  # a copy or an unpickled layer: register on first use
        if _is_compiling():
            return _ops.linear(x.contiguous(), self.packed, self.scales, self.bias, self._spec,
                               self.handle)
        # Eager: the buffers straight from their dicts (nn.Module.__getattr__ costs ~0.7 us
        # per lookup, a tenth of a call's overhead for three of them).
        t = _timer
        bufs = self._buffers
        if t is None:
            return _OP(x.contiguous(), bufs["packed"], bufs["scales"], self._parameters["bias"],
                       self._spec, self.handle)
        t0 = _now()
        y = _OP(x.contiguous(), bufs["packed"], bufs["scales"], self._parameters["bias"],
                self._spec, self.handle)
        t.ns += _now() - t0
        t.calls += 1
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, format={self.config.format.value}, "
                f"act={self.config.act}, scale={self.config.scale}")

    # -- state --------------------------------------------------------------------------------

    def get_extra_state(self):
        return {"config": self.config.to_dict(), "in_features": self.in_features,
                "out_features": self.out_features, "layout": reference.LAYOUT}

    def set_extra_state(self, state) -> None:
        # Runs after the buffers are loaded. ``packed`` was saved in the layout revision the
        # state names (states before kernels/4 name none: kernels/3), and is brought to this
        # revision's layout, or refused, by reference.relayout.
        want = self.get_extra_state()
        saved = dict(state) if isinstance(state, dict) else state
        rev = saved.pop("layout", _LAYOUT_UNNAMED) if isinstance(saved, dict) else None
        want.pop("layout")
        if saved != want:
            raise ValueError(f"BitLinear state was saved for {state!r}; this layer is {want!r} "
                             f"(make the BitLinear with the same config and shape)")
        if rev != reference.LAYOUT and getattr(self, "_packed_in_state", True):
            try:
                blob = reference.relayout(self.config.format, self.out_features,
                                          self.in_features, self.packed, rev)
            except ValueError as e:
                raise ValueError(f"BitLinear state ({self.extra_repr()}): packed weights in "
                                 f"layout {rev}: {e}") from None
            with torch.no_grad():
                self.packed.copy_(blob.reshape(self.packed.shape))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Buffers of another size (another format or shape) would be copied into ours by
        # shape only; report them clearly instead.
        for name in ("packed", "scales"):
            key = prefix + name
            if key in state_dict and state_dict[key].shape != self._buffers[name].shape:
                raise ValueError(f"{key}: saved with shape {tuple(state_dict[key].shape)}, this "
                                 f"layer has {tuple(self._buffers[name].shape)} "
                                 f"({self.extra_repr()})")
        # set_extra_state converts ``packed`` only when this state replaced it.
        self._packed_in_state = prefix + "packed" in state_dict
        try:
            super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        finally:
            del self._packed_in_state
        self._weights_changed()

    def _apply(self, fn, *args, **kwargs):
        # Snapshots of the float32 tensors (detached: a later `param.data = ...` cannot change
        # them).
        keep = {n: (None if t is None else t.detach())
                for n, t in (("scales", self.scales), ("bias", self.bias))}
        out = super()._apply(fn, *args, **kwargs)
        for name, old in keep.items():
            if old is None:
                continue
            new = getattr(self, name)
            if new.dtype != torch.float32:  # a dtype cast: keep float32, follow the device
                fixed = old.detach().to(new.device)
                if name == "bias":
                    self.bias.data = fixed
                else:
                    self._buffers[name] = fixed
        return out


def default_filter(module: nn.Module, fqn: str) -> bool:
    """quantize_'s default: every nn.Linear except ``lm_head`` and embedding-like layers (a
    name containing "embed", or a weight shared with an nn.Embedding is checked by quantize_)."""
    if not isinstance(module, nn.Linear):
        return False
    leaf = fqn.rsplit(".", 1)[-1]
    return "lm_head" not in fqn and "embed" not in leaf


def quantize_(model: nn.Module, config: Optional[QuantConfig] = None,
              filter_fn: Optional[Callable[[nn.Module, str], bool]] = None) -> nn.Module:
    """Replace ``model``'s linear layers by :class:`BitLinear` in place (as torchao's
    ``quantize_`` does) and return the model.

    A module is replaced when it is an ``nn.Linear``, ``filter_fn(module, fqn)`` is true (the
    default skips ``lm_head`` and embeddings), its name matches none of
    ``config.modules_to_not_convert``, and its weight is not shared with an ``nn.Embedding``
    (tied embeddings stay float)."""
    config = config if config is not None else QuantConfig()
    if not isinstance(config, QuantConfig):
        raise TypeError(f"config: want a bitgo.QuantConfig, got {type(config).__name__}")
    if isinstance(model, nn.Linear):
        raise ValueError("quantize_ replaces submodules in place; wrap a bare nn.Linear in a "
                         "module, or use BitLinear.from_linear")
    filter_fn = filter_fn or default_filter
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    targets = []
    for fqn, mod in model.named_modules():
        if (fqn and isinstance(mod, nn.Linear) and filter_fn(mod, fqn) and not config.skips(fqn)
                and id(mod.weight) not in tied):
            targets.append(fqn)
    for fqn in targets:
        parent_name, _, leaf = fqn.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, BitLinear.from_linear(getattr(parent, leaf), config))
    return model
