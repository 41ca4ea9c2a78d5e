"""The operator ``bitgo::linear``: the one call from PyTorch into bitgo.

    bitgo::linear(Tensor x, Tensor packed, Tensor scales, Tensor? bias, str spec, int handle)
        -> Tensor

``x`` is [..., K] float32/bfloat16/float16 on the CPU, contiguous; ``packed``/``scales``/
``bias`` are the layer's packed weights (uint8), float32 scales and float32 bias; ``spec`` is
``QuantConfig.spec(M, K)`` ("format|act|scale|M|K|codebook"); ``handle`` names the layer's
registration with a bitd client (0: none, compute with ``bitgo.reference``). The result is
[..., M] in x's dtype, a new tensor.

On torch >= 2.4 the op is a ``torch.library.custom_op`` with a fake (meta) implementation, so
``torch.library.opcheck`` passes and ``torch.compile(fullgraph=True)`` sees one opaque node; on
older torch (Debian's 1.13) it is defined with ``torch.library.Library``. The namespace is
``bitgo``, never ``vllm``.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, Dict, Optional

import torch

from . import reference
from .config import QuantConfig

__all__ = ["linear", "parse_spec", "register_runner", "unregister_runner", "HAS_CUSTOM_OP"]

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")


# handle -> runner(x, packed, scales, bias, spec) for layers registered with a daemon; the
# runner checks its arguments (with check(), or faster against what it registered).
_runners: Dict[int, Callable] = {}
_runners_lock = threading.Lock()


def register_runner(handle: int, runner: Callable) -> None:
    """Route calls with this handle (> 0) to runner instead of the reference."""
    if handle <= 0:
        raise ValueError(f"handle {handle}: must be positive (0 means the reference)")
    with _runners_lock:
        _runners[handle] = runner


def unregister_runner(handle: int) -> None:
    with _runners_lock:
        _runners.pop(handle, None)


@functools.lru_cache(maxsize=4096)
def parse_spec(spec: str):
    """(QuantConfig, M, K) of a layer spec string, cached."""
    return QuantConfig.from_spec(spec)


@functools.lru_cache(maxsize=4096)
def _spec_sizes(spec: str):
    """(QuantConfig, M, K, packed bytes, number of scales) of a spec, cached."""
    cfg, m, k = parse_spec(spec)
    return cfg, m, k, reference.layout(cfg.format, m, k).nbytes, cfg.num_scales(m, k)


def check(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
          bias: Optional[torch.Tensor], spec: str) -> None:
    """Every argument of a ``bitgo::linear`` call checked against the layer spec; a
    ValueError or TypeError naming the argument and the problem."""
    cfg, m, k, nbytes, ns = _spec_sizes(spec)
    reference.check_input(x, k, "bitgo::linear")
    if packed.dtype != torch.uint8 or packed.numel() != nbytes:
        raise ValueError(f"bitgo::linear: packed weights are {packed.dtype} with "
                         f"{packed.numel()} elements, want uint8 with {nbytes} ({cfg.format.value}"
                         f" {m}x{k})")
    if scales.dtype != torch.float32 or scales.numel() != ns:
        raise ValueError(f"bitgo::linear: scales are {scales.dtype} with {scales.numel()} "
                         f"elements, want float32 with {ns} (scale {cfg.scale!r})")
    if bias is not None and (bias.dtype != torch.float32 or bias.numel() != m):
        raise ValueError(f"bitgo::linear: bias is {bias.dtype} with {bias.numel()} elements, "
                         f"want float32 with {m}")


def _linear_impl(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                 bias: Optional[torch.Tensor], spec: str, handle: int) -> torch.Tensor:
    if handle:
        runner = _runners.get(handle)  # a dict read is atomic; writers hold the lock
        if runner is None:
            raise RuntimeError(f"bitgo::linear: layer handle {handle} is not registered with a "
                               f"bitd client (it was freed, or belongs to another process)")
        return runner(x, packed, scales, bias, spec)  # it checks its arguments
    cfg, m, k, nbytes, ns = _spec_sizes(spec)
    check(x, packed, scales, bias, spec)
    return reference.linear_packed(x, packed, scales if scales.numel() else None, bias,
                                   cfg, m, k)


def _fake(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
          bias: Optional[torch.Tensor], spec: str, handle: int) -> torch.Tensor:
    _, m, _ = parse_spec(spec)
    return x.new_empty((*x.shape[:-1], m))


_SCHEMA = "linear(Tensor x, Tensor packed, Tensor scales, Tensor? bias, str spec, int handle) -> Tensor"

if HAS_CUSTOM_OP:
    @torch.library.custom_op("bitgo::linear", mutates_args=())
    def _custom_linear(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                       bias: Optional[torch.Tensor], spec: str, handle: int) -> torch.Tensor:
        return _linear_impl(x, packed, scales, bias, spec, handle)

    _custom_linear.register_fake(_fake)
    _LIB = None
else:  # torch < 2.4: eager only
    _LIB = torch.library.Library("bitgo", "DEF")
    _LIB.define(_SCHEMA)
    _LIB.impl("linear", _linear_impl, "CompositeExplicitAutograd")


def linear(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
           bias: Optional[torch.Tensor], spec: str, handle: int = 0) -> torch.Tensor:
    """Call ``torch.ops.bitgo.linear``."""
    return torch.ops.bitgo.linear(x, packed, scales, bias, spec, handle)
