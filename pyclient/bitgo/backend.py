"""Which backend computes ``bitgo::linear``, and layers registered with bitd.

The backend is ``"bitd"`` (the default: layers are registered with a bitd daemon through
:func:`bitgo.client.default_client` and computed there) or ``"reference"`` (plain PyTorch,
:mod:`bitgo.reference`, no daemon). It is read from ``$BITGO_BACKEND`` and can be changed
with :func:`set_backend`; it decides what layers do when their weights are set, so set it
before building or quantizing a model.

A :class:`RemoteLayer` is one layer's registration: its packed weights, scales and bias are
uploaded once, and the integer ``handle`` it gets routes ``bitgo::linear`` calls to bitd.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Optional

import torch

from . import _ops, reference
from .config import QuantConfig

__all__ = ["get_backend", "set_backend", "RemoteLayer", "BACKENDS"]

BACKENDS = ("bitd", "reference")
_backend: Optional[str] = None
_lock = threading.Lock()


def _check_backend(name: str, where: str) -> str:
    v = str(name).strip().lower()
    if v not in BACKENDS:
        raise ValueError(f"{where} {name!r}: allowed backends are {', '.join(BACKENDS)}")
    return v


def get_backend() -> str:
    """The current backend: ``set_backend``'s, else ``$BITGO_BACKEND``, else ``"bitd"``."""
    global _backend
    if _backend is None:
        env = os.environ.get("BITGO_BACKEND", "").strip()
        _backend = _check_backend(env, "BITGO_BACKEND") if env else "bitd"
    return _backend


def set_backend(name: str) -> None:
    """Choose the backend for layers whose weights are set from now on."""
    global _backend
    _backend = _check_backend(name, "backend")


_next_handle = 0


def _new_handle() -> int:
    global _next_handle
    with _lock:
        _next_handle += 1
        return _next_handle


def _release(client, ids, handle: int) -> None:
    _ops.unregister_runner(handle)
    if not client.closed:
        for i in ids:
            client.free_later(i)


def _weak_runner(layer: "RemoteLayer"):
    """The op's runner for a layer, holding it weakly (so that dropping the layer frees its
    registration)."""
    ref = weakref.ref(layer)
    handle = layer.handle

    def runner(x, packed, scales, bias, cfg, m, k):
        r = ref()
        if r is None:
            raise RuntimeError(f"bitgo::linear: layer handle {handle} was freed")
        return r.run(x, packed, scales, bias, cfg, m, k)

    return runner


class RemoteLayer:
    """A layer registered with bitd and the ``bitgo::linear`` handle that runs it there.

    ``bias`` is registered with the layer; calls that pass exactly that tensor (or a tensor
    with the same storage) get it added by bitd. Calls with another bias or none (vLLM's
    row-parallel ranks > 0, ``skip_bias_add``) are computed by a bias-free twin registration
    made on first need, in float32, with the bias added by PyTorch in float32 and the result
    rounded to the input dtype: the same arithmetic as ``bitgo.reference``.

    The registration is freed when the RemoteLayer is garbage collected or ``close``\\ d.
    Changing the registered tensors in place does not reach bitd: register again.
    """

    def __init__(self, client, cfg: QuantConfig, m: int, k: int, packed: torch.Tensor,
                 scales: torch.Tensor, bias: Optional[torch.Tensor], name: str = "") -> None:
        self.client = client
        self.handle = _new_handle()
        # bitd keeps layer names unique within a session; the handle makes them so (a model
        # loaded twice, a layer registered again after its weights changed)
        name = f"{name}#{self.handle}" if name else ""
        self.cfg, self.m, self.k, self.name = cfg, m, k, name
        ns = cfg.num_scales(m, k)
        info = client.register(cfg.format.value, m, k, packed, scales if ns else None, bias,
                               packed=True, act=cfg.act, scale=cfg.scale,
                               codebook=cfg.codebook, name=name)
        self.id = int(info["id"])
        self.info = info
        self.bias = bias
        self._ids = [self.id]
        self._nobias: Optional[int] = None
        _ops.register_runner(self.handle, _weak_runner(self))
        self._finalizer = weakref.finalize(self, _release, client, self._ids, self.handle)

    def run(self, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
            bias: Optional[torch.Tensor], cfg: QuantConfig, m: int, k: int) -> torch.Tensor:
        """The runner behind the handle (x already checked by the op)."""
        mine = self.bias
        if bias is mine or (bias is not None and mine is not None
                            and bias.data_ptr() == mine.data_ptr()
                            and bias.shape == mine.shape):
            return self.client._forward(self.id, x, m)[0]
        # Another bias than the registered one: the bias-free twin, then the epilogue's last
        # step (y + bias in float32) and the output rounding here.
        if mine is None:
            lid = self.id
        else:
            if self._nobias is None:
                info = self.client.register(cfg.format.value, m, k, packed,
                                            scales if scales.numel() else None, None,
                                            packed=True, act=cfg.act, scale=cfg.scale,
                                            codebook=cfg.codebook,
                                            name=f"{self.name}/nobias" if self.name else "")
                self._nobias = int(info["id"])
                self._ids.append(self._nobias)
            lid = self._nobias
        if bias is None:
            return self.client._forward(lid, x, m)[0]
        y = self.client._forward(lid, x.to(torch.float32), m)[0]
        y = y + bias.to(torch.float32)
        return reference._to_dtype(y, x.dtype)

    def close(self) -> None:
        """Unregister the handle and free the registration(s) in bitd."""
        self._finalizer()

    def __deepcopy__(self, memo):
        raise TypeError("a RemoteLayer (a registration with bitd) cannot be copied; register "
                        "the copy's weights again")

    def __repr__(self) -> str:
        return (f"RemoteLayer(id={self.id}, handle={self.handle}, {self.cfg.format.value} "
                f"{self.m}x{self.k}, client={self.client!r})")
