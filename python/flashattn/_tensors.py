"""Turning NumPy arrays and torch tensors into fa_tensor views, and making
outputs of the same kind. Inputs pass by pointer and strides: nothing is
copied unless the last dimension is strided (the one layout the C library
cannot read)."""

import ctypes
import os
import sys

import numpy as np

from ._lib import DType, Device, FaTensor, FlashAttnError, Status

# A valid address for zero-element tensors, whose data pointer may be NULL
# (NULL would read as "absent"); nothing is ever read from it.
_EMPTY = ctypes.create_string_buffer(16)
_EMPTY_ADDR = ctypes.addressof(_EMPTY)

_np_codes = None


def _numpy_codes():
    """NumPy dtype -> fa_dtype, with bfloat16 / float8 when ml_dtypes is installed."""
    global _np_codes
    if _np_codes is None:
        codes = {
            np.dtype(np.float32): DType.F32,
            np.dtype(np.float16): DType.F16,
            np.dtype(np.int32): DType.I32,
            np.dtype(np.uint8): DType.U8,
            np.dtype(np.bool_): DType.U8,
        }
        try:
            import ml_dtypes
            codes[np.dtype(ml_dtypes.bfloat16)] = DType.BF16
            codes[np.dtype(ml_dtypes.float8_e4m3fn)] = DType.F8_E4M3
        except ImportError:
            pass
        _np_codes = codes
    return _np_codes


def numpy_dtype(code):
    """fa_dtype -> NumPy dtype (bfloat16 needs ml_dtypes)."""
    for dt, c in _numpy_codes().items():
        if c == code and dt != np.dtype(np.bool_):
            return dt
    raise FlashAttnError(Status.ERR_DTYPE, f"dtype {DType(code).name} needs ml_dtypes with NumPy "
                         "(pip install ml_dtypes)")


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_code(dtype):
    torch = _torch()
    table = {torch.float32: DType.F32, torch.float16: DType.F16, torch.bfloat16: DType.BF16,
             torch.int32: DType.I32, torch.uint8: DType.U8, torch.bool: DType.U8}
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is not None:
        table[f8] = DType.F8_E4M3
    return table.get(dtype)


def torch_dtype(code):
    torch = _torch()
    return {DType.F32: torch.float32, DType.F16: torch.float16, DType.BF16: torch.bfloat16,
            DType.I32: torch.int32, DType.U8: torch.uint8}[code]


def dtype_code(x, name):
    """fa_dtype of an array or tensor; FlashAttnError(ERR_DTYPE) if it has none."""
    code = _torch_code(x.dtype) if is_torch(x) else _numpy_codes().get(np.dtype(x.dtype))
    if code is None:
        raise FlashAttnError(Status.ERR_DTYPE, f"{name}: dtype {x.dtype} is not supported "
                             "(float32, float16 and bfloat16 data; int32 indices)")
    return code


def _check_ndim(x, name):
    if not 1 <= x.ndim <= 4:
        raise FlashAttnError(Status.ERR_SHAPE, f"{name}: expected 1 to 4 dimensions, got {x.ndim}")


def as_readable(x, name):
    """x itself when the C library can read it in place, else a copy it can read.
    Only a strided last dimension (or, in NumPy, a negative or unaligned stride)
    forces the copy."""
    if x is None:
        return None
    if not (is_torch(x) or isinstance(x, np.ndarray)):
        x = np.asarray(x)
    _check_ndim(x, name)
    if is_torch(x):
        if x.ndim and x.shape[-1] > 1 and x.stride(-1) != 1:
            x = x.contiguous()
        return x
    item = x.itemsize
    if any(s < 0 or s % item for s in x.strides) or (x.shape[-1] > 1 and x.strides[-1] != item):
        x = np.ascontiguousarray(x)
    return x


_I64x4 = ctypes.c_int64 * 4


def describe(x, name):
    """An FaTensor viewing x (which must already be readable in place);
    None gives the absent tensor (data NULL)."""
    if x is None:
        return FaTensor()
    ndim = x.ndim
    if not 1 <= ndim <= 4:
        _check_ndim(x, name)
    shape = tuple(x.shape)
    device, index = Device.CPU, 0
    if is_torch(x):
        strides = list(x.stride())
        ptr = x.data_ptr()
        kind = x.device.type
        if kind == "cuda":
            device, index = Device.CUDA, x.device.index or 0
        elif kind != "cpu":
            raise FlashAttnError(Status.ERR_DEVICE, f"{name}: device {x.device} is not supported "
                                 "(cpu or cuda)")
    else:
        item = x.itemsize
        strides = [s // item for s in x.strides]
        ptr = x.ctypes.data
    if 0 in shape:  # nothing is read: describe it as contiguous
        step = 1
        for d in reversed(range(ndim)):
            strides[d], step = step, step * max(shape[d], 1)
    elif ptr == 0:
        raise FlashAttnError(Status.ERR_NULL_POINTER, f"{name}: data pointer is NULL")
    if shape[-1] == 1:
        strides[-1] = 1  # a dimension of size 1 is never stepped over
    return FaTensor(ptr or _EMPTY_ADDR, dtype_code(x, name), device, index, ndim,
                    _I64x4(*shape), _I64x4(*strides))


def _numel(x):
    n = 1
    for s in x.shape:
        n *= s
    return n


# FLASHATTN_POISON=1 (for tests): outputs start as NaN, so any element a call
# fails to write shows up.
_POISON = os.environ.get("FLASHATTN_POISON") == "1"


def empty(like, shape, code):
    """An uninitialised contiguous output of the same kind (and device) as like."""
    poison = _POISON and code in (DType.F32, DType.F16, DType.BF16)
    if is_torch(like):
        torch = _torch()
        if poison:
            return torch.full(tuple(shape), float("nan"), dtype=torch_dtype(code),
                              device=like.device)
        return torch.empty(tuple(shape), dtype=torch_dtype(code), device=like.device)
    if poison:
        return np.full(tuple(shape), np.nan, dtype=numpy_dtype(code))
    return np.empty(tuple(shape), dtype=numpy_dtype(code))


def full_int32(like, shape, value):
    """An int32 array of the same kind and device as like, filled with value."""
    if is_torch(like):
        return _torch().full(tuple(shape), int(value), dtype=_torch().int32, device=like.device)
    return np.full(tuple(shape), int(value), dtype=np.int32)


def to_like(x, like, code=None):
    """x (array, tensor or sequence) as the same kind and device as like,
    optionally converted to fa_dtype code."""
    if x is None:
        return None
    if is_torch(like):
        torch = _torch()
        dt = torch_dtype(code) if code is not None else None
        if is_torch(x):
            return x.to(device=like.device, dtype=dt if dt is not None else x.dtype)
        return torch.as_tensor(np.asarray(x), device=like.device, dtype=dt)
    if is_torch(x):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if code is not None and np.dtype(x.dtype) != numpy_dtype(code):
        x = x.astype(numpy_dtype(code))
    return x
