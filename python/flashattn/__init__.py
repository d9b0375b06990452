"""flashattn: exact FlashAttention on the CPU and CUDA, with flash-attn 2's
Python functions.

    from flashattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)

q, k, v are torch tensors (CPU or CUDA, with autograd) or NumPy arrays (CPU),
laid out (batch, seqlen, heads, head_dim). torch is optional and imported only
when torch tensors are passed.
"""

from ._core import dropout_mask, get_backend, merge, set_backend, set_num_threads
from ._lib import Backend, DType, FlashAttnError, Status
from .interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "0.1.0"

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
    "FlashAttnError", "Status", "DType", "Backend",
    "dropout_mask", "merge", "set_backend", "get_backend", "set_num_threads",
    "library_version", "library_path", "cpu_features", "cuda_device_count", "backend_available",
]


def library_version():
    """Version string of the loaded C library."""
    from ._lib import lib
    return lib().fa_version().decode()


def library_path():
    """Path of the loaded C library (loading it if needed)."""
    from . import _lib
    _lib.lib()
    return _lib.library_path


def cpu_features():
    """CPU features the library detected and uses, e.g. "avx2 fma f16c avx512f"."""
    from ._lib import lib
    return lib().fa_cpu_features().decode()


def cuda_device_count():
    """CUDA devices the library can use (0 without a driver or CUDA build)."""
    from ._lib import lib
    return int(lib().fa_cuda_device_count())


def backend_available(backend):
    """Whether a backend ("reference", "cpu", "cuda", "cuda_sm80") was built and runs here."""
    from ._lib import lib
    b = Backend[backend.upper()] if isinstance(backend, str) else Backend(backend)
    return bool(lib().fa_backend_available(int(b)))
