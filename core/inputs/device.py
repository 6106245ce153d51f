"""Rows that live on a GPU: what ``predict`` reads from device arrays, and what it returns.

``CompiledForest.predict`` sends an input here before any host conversion when it is a device
array, recognised by protocol, never by importing a library:

- an object with ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA tensors, Numba device
  arrays, ...): read in place, through the pointer, shape, strides and stream it describes;
- an object with ``__dlpack__`` whose ``__dlpack_device__`` is a CUDA device and which has no
  ``__cuda_array_interface__`` (JAX arrays, for one): taken in place through CuPy's
  ``from_dlpack`` where CuPy is installed, else an :class:`InputError` that says so.

A DLPack object on the CPU (a PyTorch CPU tensor) is a host array and takes the host path, as
before.  The target's kernel reads device rows where it implements
:class:`silvanforge.runtime.kernel.DeviceKernel` (the cuda target); any other target (cpu, amd) is an
:class:`InputError`: a device array is never copied through host memory behind the caller's back.

What the kernel reads, and so what is checked here: a 2-D array of exactly the kernel's input
dtype (float32 for XGBoost-like models, float64 for LightGBM's: convert on the device,
``x.astype(cupy.float64)``), ``num_features`` columns (a model that reads only the first
columns of wider rows takes wider ones), C or Fortran order (a strided view: copy it on the
device, ``cupy.ascontiguousarray(x)``), on the kernel's device.

The result is on the same device, as the same kind of array: a CuPy array for CuPy input
(``cupy.asarray`` of the result, no copy), a torch tensor on the input's device for torch input
(``torch.as_tensor`` of its ``__cuda_array_interface__``, no copy), and otherwise a
:class:`DeviceArray`, a minimal object exposing ``__cuda_array_interface__`` that any of those
libraries takes without a copy.  The rows never leave the device; margins are computed there.
The output transform (sigmoid, softmax, ...) is the core's own, exact as on the host: a kernel
applies it on the device where its result is the core's bit for bit (the cuda target: float32
sigmoid, exp, hinge and softmax), and otherwise the margins (``n x outputs`` values) are
transformed on the host and the values copied back; ``output_margin=True`` (or a model without a transform) returns the kernel's device buffer as it
is.  The call is synchronous: the stream the input names is waited for before the rows are
read, and the result is complete when ``predict`` returns.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import InputError

#: DLPack device types (dlpack.h): CPU, CUDA, CUDA host (pinned) memory, CUDA managed memory.
DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED = 1, 2, 3, 13
_HOST_DLPACK = (DLPACK_CPU, DLPACK_CUDA_HOST)


@dataclasses.dataclass
class DeviceRows:
    """A 2-D array of rows in device memory, as a kernel reads it: ``pointer`` to element
    ``[0, 0]``, ``shape`` (n, columns), ``strides`` in elements (row, column), ``dtype``,
    ``device`` (the CUDA ordinal where known, else None: the kernel finds it from the pointer),
    ``stream`` (the CUDA stream the producer wrote it on, per ``__cuda_array_interface__`` v3:
    None, 1 legacy default, 2 per-thread default, or a handle), ``kind`` (``"cupy"``,
    ``"torch"`` or ``"interface"``: what the result is returned as) and ``owner`` (the caller's
    object, kept alive while the kernel reads it)."""

    pointer: int
    shape: tuple
    strides: tuple
    dtype: np.dtype
    device: int | None
    stream: int | None
    kind: str
    owner: object


class DeviceArray:
    """A device buffer as ``__cuda_array_interface__`` (version 3) describes it: what predict
    returns for device input that is neither CuPy nor torch.  ``owner`` keeps the memory alive
    (a library taking the array without a copy keeps this object, and so the owner)."""

    def __init__(self, pointer: int, shape: tuple, dtype, owner, device: int | None = None):
        self.pointer, self.shape, self.dtype = int(pointer), tuple(int(s) for s in shape), np.dtype(dtype)
        self.owner, self.device = owner, device

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer, False),
                "strides": None, "version": 3, "stream": None}

    def reshaped(self, shape: tuple) -> "DeviceArray":
        """The same memory (C order) under another shape of as many elements."""
        if int(np.prod(shape)) != int(np.prod(self.shape)):
            raise ValueError(f"cannot view {self.shape} as {shape}")
        return DeviceArray(self.pointer, shape, self.dtype, self.owner, self.device)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def is_device_array(X) -> bool:
    """Whether ``X`` lives on a CUDA device (checked without importing any array library)."""
    if hasattr(X, "__cuda_array_interface__"):
        return True
    dev = getattr(X, "__dlpack_device__", None)
    if dev is None or not hasattr(X, "__dlpack__"):
        return False
    try:
        kind = int(dev()[0])
    except Exception:  # noqa: BLE001 - not a DLPack producer after all: the host path decides
        return False
    return kind not in _HOST_DLPACK


def device_rows(X, num_features: int, dtype: np.dtype, wider: bool = False) -> DeviceRows:
    """``X`` (a device array, :func:`is_device_array`) checked as the kernel will read it (see
    the module docstring), or an InputError naming the problem."""
    kind = _kind(X)
    if not hasattr(X, "__cuda_array_interface__"):
        X = _from_dlpack(X)  # a CuPy array over the same memory
    try:
        cai = X.__cuda_array_interface__
    except Exception as exc:  # noqa: BLE001 - torch raises for tensors that require grad, say
        raise InputError(f"the device array's __cuda_array_interface__ is not available "
                         f"({type(exc).__name__}: {exc})") from None
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        pointer = int(cai["data"][0] or 0)
        strides = cai.get("strides")
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"a malformed __cuda_array_interface__ ({exc!r})") from None
    if cai.get("mask") is not None:
        raise InputError("device arrays with a mask are not read: fill the masked values with NaN")
    try:
        got = np.dtype(typestr)
    except TypeError:
        raise InputError(f"a device array of unknown type {typestr!r}") from None
    if len(shape) != 2:
        raise InputError(f"inputs must be a 2-D array (rows, features), got shape {shape}")
    if got.byteorder == ">" or (got.byteorder not in "=|<"):
        raise InputError(f"device arrays must be little-endian, got {typestr!r}")
    if got.newbyteorder("=") != np.dtype(dtype):
        raise InputError(f"the model reads {np.dtype(dtype).name} rows on the device, got {got.name}: "
                         f"convert on the device (for CuPy, x.astype(cupy.{np.dtype(dtype).name}))")
    n, cols = shape
    if cols != num_features and not (wider and cols > num_features):
        at_least = "at least " if wider else ""
        raise InputError(f"the model expects {at_least}{num_features} features per row, got {cols}")
    item = got.itemsize
    if strides is None:
        rs, cs = cols, 1
    else:
        try:
            sr, sc = (int(s) for s in strides)
        except (TypeError, ValueError):
            raise InputError(f"a malformed __cuda_array_interface__ strides {strides!r}") from None
        rs, cs = _element_strides(sr, sc, n, cols, item)
    if (rs, cs) not in ((cols, 1), (1, n)) and n > 1 and cols > 1:
        raise InputError(f"device rows must be C- or Fortran-ordered (contiguous); got strides "
                         f"{tuple(strides)} bytes for shape {shape}: copy on the device first "
                         "(for CuPy, cupy.ascontiguousarray(x))")
    if n and pointer == 0:
        raise InputError("the device array has a null data pointer")
    device = _device_of(X)
    return DeviceRows(pointer, (n, cols), (rs, cs), np.dtype(dtype), device, cai.get("stream"), kind, X)


def _element_strides(sr: int, sc: int, n: int, cols: int, item: int) -> tuple[int, int]:
    if n <= 1:
        sr = cols * item  # strides of a unit dimension can be anything
    if cols <= 1:
        sc = item
    if sr % item or sc % item or sr < 0 or sc < 0:
        raise InputError(f"device rows must be C- or Fortran-ordered (contiguous); got strides "
                         f"{(sr, sc)} bytes: copy on the device first (for CuPy, cupy.ascontiguousarray(x))")
    return sr // item, sc // item


def _kind(X) -> str:
    module = type(X).__module__.split(".")[0]
    return module if module in ("cupy", "torch") else "interface"


def _device_of(X) -> int | None:
    dev = getattr(X, "__dlpack_device__", None)
    if dev is not None:
        try:
            kind, ordinal = dev()
            if int(kind) == DLPACK_CUDA:
                return int(ordinal)
        except Exception:  # noqa: BLE001 - then the kernel asks the driver
            pass
    device = getattr(X, "device", None)  # CuPy's Device, Numba's ...
    ident = getattr(device, "id", None)
    return int(ident) if isinstance(ident, int) else None


def _from_dlpack(X):
    try:
        import cupy
    except ImportError:
        raise InputError(f"a {type(X).__name__} on a GPU without __cuda_array_interface__ is read through "
                         "DLPack by CuPy, which is not installed (pip install cupy-cuda12x)") from None
    try:
        return cupy.from_dlpack(X)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"the DLPack tensor could not be read on the device ({type(exc).__name__}: "
                         f"{exc})") from None


def like_input(result: DeviceArray, rows: DeviceRows):
    """``result`` as the kind of array the caller gave (see the module docstring), no copy."""
    if rows.kind == "cupy":
        import cupy

        with cupy.cuda.Device(result.device if result.device is not None else rows.device or 0):
            return cupy.asarray(result)
    if rows.kind == "torch":
        import torch

        return torch.as_tensor(result, device=getattr(rows.owner, "device", None))
    return result


__all__ = ["DeviceArray", "DeviceRows", "device_rows", "is_device_array", "like_input"]
