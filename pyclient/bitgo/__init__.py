"""bitgo: ultra-low-bit linear layers (ternary BitNet b1.58, int2, int1) for PyTorch and vLLM,
computed by the bitd daemon over shared memory.

    import bitgo
    bitgo.quantize_(model, bitgo.QuantConfig(format="i2s"))   # nn.Linear -> bitgo.BitLinear

``bitgo.reference`` holds the same arithmetic in plain PyTorch (the test oracle); the vLLM
plugin is ``bitgo.vllm`` (entry point ``vllm.general_plugins: bitgo = bitgo.vllm:register``).
"""

from . import reference
from ._ops import linear
from .config import ActKind, Format, QuantConfig, ScaleKind
from .errors import DaemonError
from .nn import BitLinear, quantize_

__version__ = "0.1.0"

__all__ = [
    "ActKind", "BitLinear", "DaemonError", "Format", "QuantConfig", "ScaleKind", "linear",
    "quantize_", "reference", "__version__",
]
