"""bitgo: ultra-low-bit linear layers (ternary BitNet b1.58, int2, int1) for PyTorch and vLLM,
computed by the bitd daemon over shared memory.

    import bitgo
    bitgo.quantize_(model, bitgo.QuantConfig(format="i2s"))   # nn.Linear -> bitgo.BitLinear

Layers compute in bitd, the daemon, reached through ``bitgo.Client`` (a private daemon is
started when none is running); ``bitgo.set_backend("reference")`` computes in plain PyTorch.
``bitgo.reference`` holds the same arithmetic in plain PyTorch (the test oracle); the vLLM
plugin is ``bitgo.vllm`` (entry point ``vllm.general_plugins: bitgo = bitgo.vllm:register``).
"""

from . import reference
from ._ops import linear
from .backend import get_backend, set_backend
from .client import Client, default_client
from .config import ActKind, Format, QuantConfig, ScaleKind
from .errors import DaemonError, RequestError
from .nn import BitLinear, quantize_

__version__ = "0.1.0"

__all__ = [
    "ActKind", "BitLinear", "Client", "DaemonError", "Format", "QuantConfig", "RequestError",
    "ScaleKind", "default_client", "get_backend", "linear", "quantize_", "reference",
    "set_backend", "__version__",
]
