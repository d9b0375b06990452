"""Loading libflashattn and describing its C API to ctypes.

The structs below mirror include/flashattn.h field for field; the test suite
checks their sizes and offsets against the header with a C compiler.
"""

import ctypes
import enum
import os
import sys
import threading

__all__ = [
    "FlashAttnError", "Status", "DType", "Device", "Backend", "Align",
    "FaTensor", "FaOptions", "lib", "check", "library_path",
]

MAX_HEAD_DIM = 256


class Status(enum.IntEnum):
    """fa_status: the value every C entry point returns."""
    OK = 0
    ERR_NULL_POINTER = 1
    ERR_SHAPE = 2
    ERR_STRIDE = 3
    ERR_DTYPE = 4
    ERR_HEAD_DIM = 5
    ERR_OPTION = 6
    ERR_SEQLENS = 7
    ERR_BLOCK_TABLE = 8
    ERR_OVERFLOW = 9
    ERR_DEVICE = 10
    ERR_BACKEND = 11
    ERR_UNSUPPORTED = 12
    ERR_WORKSPACE = 13
    ERR_OUT_OF_MEMORY = 14
    ERR_CUDA = 15
    ERR_INTERNAL = 16


class DType(enum.IntEnum):
    F32 = 0
    F16 = 1
    BF16 = 2
    F8_E4M3 = 3
    I32 = 4
    U8 = 5


class Device(enum.IntEnum):
    CPU = 0
    CUDA = 1


class Backend(enum.IntEnum):
    AUTO = 0
    REFERENCE = 1
    CPU = 2
    CUDA = 3
    CUDA_SM80 = 4


class Align(enum.IntEnum):
    BOTTOM_RIGHT = 0
    TOP_LEFT = 1


class FlashAttnError(RuntimeError):
    """A flashattn call failed. ``status`` is the :class:`Status` it returned;
    the message is the library's, naming the offending argument."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        name = status.name if isinstance(status, Status) else str(status)
        super().__init__(f"{message} [FA_{name}]" if message else f"FA_{name}")


class FaTensor(ctypes.Structure):
    """struct fa_tensor."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("device_index", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


class FaOptions(ctypes.Structure):
    """struct fa_options (all zero: plain softmax(Q K^T / sqrt(D)) V)."""
    _fields_ = [
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("use_window", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("align", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", FaTensor),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("deterministic", ctypes.c_int),
        ("q_descale", FaTensor),
        ("k_descale", FaTensor),
        ("v_descale", FaTensor),
    ]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

if sys.platform == "darwin":
    _NAMES = ("libflashattn.dylib",)
elif sys.platform == "win32":
    _NAMES = ("flashattn.dll", "libflashattn.dll")
else:
    _NAMES = ("libflashattn.so",)


def _candidates():
    """Where the library may be, in the order it is looked for."""
    # 1. the copy `pip install` put inside the package
    for name in _NAMES:
        yield os.path.join(_PACKAGE_DIR, name)
    # 2. an explicit path
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        yield env
    # 3. a source checkout: <repo>/python/flashattn -> <repo>/build
    repo = os.path.dirname(os.path.dirname(_PACKAGE_DIR))
    for name in _NAMES:
        yield os.path.join(repo, "build", name)


def _find_library():
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise OSError("flashattn: libflashattn not found; looked at " + ", ".join(tried)
                  + ". Install the package (pip install ./python), or build the library "
                  "with CMake and set FLASHATTN_LIBRARY to its path.")


_P = ctypes.POINTER
_T = _P(FaTensor)
_O = _P(FaOptions)
_ctx = ctypes.c_void_p
_int, _i64, _u64, _f32 = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float

# name: (restype, argtypes)
_PROTOTYPES = {
    "fa_status_name": (ctypes.c_char_p, [_int]),
    "fa_last_error": (ctypes.c_char_p, []),
    "fa_version": (ctypes.c_char_p, []),
    "fa_dtype_size": (ctypes.c_size_t, [_int]),
    "fa_dtype_name": (ctypes.c_char_p, [_int]),
    "fa_dropout_keep": (_int, [_u64, _u64, _f32, _i64, _i64, _i64, _i64]),
    "fa_dropout_mask": (_int, [_u64, _u64, _f32, _T]),
    "fa_philox4x32_10": (None, [_P(ctypes.c_uint32), _P(ctypes.c_uint32), _P(ctypes.c_uint32)]),
    "fa_backend_name": (ctypes.c_char_p, [_int]),
    "fa_backend_available": (_int, [_int]),
    "fa_context_create": (_int, [_P(_ctx)]),
    "fa_context_destroy": (None, [_ctx]),
    "fa_context_set_backend": (_int, [_ctx, _int]),
    "fa_context_set_num_threads": (_int, [_ctx, _int]),
    "fa_context_set_cuda_stream": (_int, [_ctx, ctypes.c_void_p]),
    "fa_context_set_workspace": (_int, [_ctx, ctypes.c_void_p, ctypes.c_size_t]),
    "fa_context_set_dry_run": (_int, [_ctx, _int]),
    "fa_context_workspace_needed": (ctypes.c_size_t, [_ctx]),
    "fa_fwd": (_int, [_ctx, _T, _T, _T, _O, _T, _T]),
    "fa_bwd": (_int, [_ctx, _T, _T, _T, _T, _T, _T, _O, _T, _T, _T]),
    "fa_varlen_fwd": (_int, [_ctx, _T, _T, _T, _T, _T, _int, _int, _O, _T, _T]),
    "fa_varlen_bwd": (_int, [_ctx, _T, _T, _T, _T, _T, _T, _T, _T, _int, _int, _O, _T, _T, _T]),
    "fa_fwd_kvcache": (_int, [_ctx, _T, _T, _T, _T, _T, _T, _T, _int, _O, _T, _T]),
    "fa_merge": (_int, [_ctx, _int, _T, _T, _T, _T]),
    "fa_cpu_features": (ctypes.c_char_p, []),
    "fa_cuda_device_count": (_int, []),
    "fa_cuda_device_info": (_int, [_int, ctypes.c_char_p, ctypes.c_size_t, _P(_int), _P(_int)]),
    "fa_fwd_flops": (ctypes.c_double, [_i64, _i64, _i64, _i64, _i64, _int]),
}

_lock = threading.Lock()
_lib = None
library_path = None


def lib():
    """The loaded library (loaded on first use, so importing never fails)."""
    global _lib, library_path
    if _lib is None:
        with _lock:
            if _lib is None:
                path = _find_library()
                handle = ctypes.CDLL(path)
                for name, (restype, argtypes) in _PROTOTYPES.items():
                    fn = getattr(handle, name, None)
                    if fn is None:  # an older library: leave the rest usable
                        continue
                    fn.restype = restype
                    fn.argtypes = argtypes
                library_path = path
                _lib = handle
    return _lib


def last_error():
    msg = lib().fa_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status):
    """Raise FlashAttnError for a failed status, with fa_last_error()'s message."""
    if status != 0:
        raise FlashAttnError(status, last_error())
