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
_FAST_DTYPES = frozenset((torch.float32, torch.bfloat16, torch.float16))
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

    def runner(x, packed, scales, bias, spec):
        r = ref()
        if r is None:
            raise RuntimeError(f"bitgo::linear: layer handle {handle} was freed")
        return r.run(x, packed, scales, bias, spec)

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
        self._kshape = (k,)
        ns = cfg.num_scales(m, k)
        info = client.register(cfg.format.value, m, k, packed, scales if ns else None, bias,
                               packed=True, act=cfg.act, scale=cfg.scale,
                               codebook=cfg.codebook, name=name)
        self.id = int(info["id"])
        self.info = info
        self.bias = bias
        self.spec = cfg.spec(m, k)
        # The last (packed, scales, bias) that passed every check and are the registered ones
        # (at first the registered tensors; then also, say, vLLM's Parameters around them):
        # later calls with these very objects skip the checks that cannot change (dtype,
        # size, which weights).
        self._reg = self._known = (packed, scales, bias)
        self._ids = [self.id]
        self._nobias: Optional[int] = None
        _ops.register_runner(self.handle, _weak_runner(self))
        self._finalizer = weakref.finalize(self, _release, client, self._ids, self.handle)

    def run(self, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
            bias: Optional[torch.Tensor], spec: str) -> torch.Tensor:
        """The runner behind the handle: checks the call, computes it in bitd."""
        m = self.m
        known = self._known
        if (packed is known[0] and scales is known[1] and bias is known[2]
                and (spec is self.spec or spec == self.spec)):
            # The weights are the registered ones; x's dtype and shape are those of an earlier
            # call when the client has views for them (float32 and bfloat16 only).
            sh = x.shape
            if sh[-1:] == self._kshape and x.is_cpu and x.is_contiguous():
                client = self.client
                ent = client._views.get((sh, x.dtype, m))
                if ent is not None:
                    return client._forward_view(self.id, x, ent)
                if x.dtype in _FAST_DTYPES:
                    return client._forward(self.id, x, m)[0]
        self._check(x, packed, scales, bias, spec)
        return self._run_bias(x, bias)

    def _check(self, x, packed, scales, bias, spec) -> None:
        """The slow path of run's checks: everything, and that the weights are the
        registered ones."""
        _ops.check(x, packed, scales, bias, spec)
        if spec != self.spec:
            raise ValueError(f"bitgo::linear: layer spec {spec!r}, but handle {self.handle} "
                             f"was registered as {self.spec!r}")
        for got, reg in zip((packed, scales), self._reg):
            # the same memory, or a copy (opcheck and compilers may pass copies)
            if got.data_ptr() != reg.data_ptr() and not torch.equal(got, reg):
                raise ValueError(f"bitgo::linear: the packed weights or scales differ from "
                                 f"those handle {self.handle} was registered with (register "
                                 f"the layer again after changing them)")
        if self._same_bias(bias):
            self._known = (packed, scales, bias)

    def _same_bias(self, bias: Optional[torch.Tensor]) -> bool:
        """Whether bias is the registered one (the same tensor, or one over the same memory,
        such as vLLM's Parameter around it)."""
        mine = self.bias
        return bias is mine or (bias is not None and mine is not None
                                and bias.data_ptr() == mine.data_ptr()
                                and bias.shape == mine.shape)

    def _run_bias(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """A checked call with any bias."""
        cfg, m, k = self.cfg, self.m, self.k
        mine = self.bias
        if self._same_bias(bias):
            return self.client._forward(self.id, x, m)[0]
        # Another bias than the registered one: the bias-free twin, then the epilogue's last
        # step (y + bias in float32) and the output rounding here.
        if mine is None:
            lid = self.id
        else:
            if self._nobias is None:
                packed, scales = self._known[:2]
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
