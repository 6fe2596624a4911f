"""A restricted unpickler for downloaded pickles.

LRGB ships its splits as a pickled dict of numpy arrays, and its superpixel graphs as pickled tuples of torch tensors.
``pickle.load`` would run any callable the file names; :func:`load` admits only what such files need and refuses
everything else with :class:`UnsafePickleError` before it is called.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, BinaryIO

import numpy as np
import torch

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover
    from numpy.core.multiarray import _reconstruct


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for a global outside the allow-list."""


def _numpy_globals() -> dict[tuple[str, str], Any]:
    allowed = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }
    # The array rebuild function and scalar constructor moved from numpy.core to numpy._core in numpy 2; pickles
    # written by either numpy name either module.
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = _reconstruct
        allowed[(module, "scalar")] = _numpy_scalar
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool_", "Int64DType", "Float64DType", "Float32DType", "Int32DType", "BoolDType"):
        for module in ("numpy", "numpy.dtypes"):
            obj = getattr(np, name, None) if module == "numpy" else getattr(getattr(np, "dtypes", None), name, None)
            if obj is not None:
                allowed[(module, name)] = obj
    return allowed


def _numpy_scalar(dtype: np.dtype, data: bytes = b"") -> Any:
    if dtype.hasobject:
        raise UnsafePickleError("refusing a numpy object-dtype scalar in a pickle")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _storage_from_bytes(data: bytes) -> Any:
    # torch pickles each storage as a nested torch.save blob; read it with torch's own safe loader.
    return torch.load(io.BytesIO(data), weights_only=True)


def _torch_globals() -> dict[tuple[str, str], Any]:
    import collections

    import torch._utils

    return {
        ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
        ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
        ("collections", "OrderedDict"): collections.OrderedDict,
    }


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, allowed: dict[tuple[str, str], Any], source: str) -> None:
        super().__init__(file)
        self._allowed = allowed
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to unpickle {self._source}: it asks for '{module}.{name}', which is not an allowed numpy "
                f"(or torch tensor) type. The file is not a plain data pickle; do not load it, and re-download it "
                f"from its source.") from None


def load(file: Any, allow_torch_tensors: bool = False) -> Any:
    """Unpickles a file admitting only numpy arrays, dtypes and scalars (and containers: dict, list, tuple, str,
    numbers, which need no globals), plus torch tensors when :obj:`allow_torch_tensors` is set.

    Args:
        file: A path or a binary file object.
        allow_torch_tensors (bool, optional): Also admit pickled ``torch.Tensor`` objects; their storages are read
            with ``torch.load(weights_only=True)``. (default: :obj:`False`)

    Raises:
        UnsafePickleError: if the pickle names any other global (e.g. ``os.system``).
    """
    allowed = _numpy_globals()
    if allow_torch_tensors:
        allowed.update(_torch_globals())
    if isinstance(file, (str, bytes)) or hasattr(file, "__fspath__"):
        with open(file, "rb") as f:
            return _RestrictedUnpickler(f, allowed, str(file)).load()
    return _RestrictedUnpickler(file, allowed, getattr(file, "name", "<stream>")).load()


def loads(data: bytes, allow_torch_tensors: bool = False) -> Any:
    """:func:`load` for a pickle held in memory."""
    return load(io.BytesIO(data), allow_torch_tensors)
