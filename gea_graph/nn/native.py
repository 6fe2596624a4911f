r"""Native CPU kernels, compiled at first use with the system C compiler and loaded with :mod:`ctypes`.

A kernel is plain C (no Python or PyTorch headers, so it compiles in a fraction of a second) specialised to the
sizes it is called with (compile-time constants let the compiler keep a row in vector registers). Each process
compiles the variants it needs into a temporary directory, loads them and deletes the directory at once: nothing
is left on disk and no cache can go stale. Where no compiler is found, compilation fails, or
``GEA_GRAPH_NATIVE=0`` is set, :func:`external_units_kernel` returns :obj:`None` and the layers run their
PyTorch path (the same math; tests compare the two).
"""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from importlib import resources

_LOCK = threading.Lock()
_LOADED: dict[tuple[int, int, int], ctypes.CDLL | None] = {}
_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float

#: Largest head width and unit count the external-units kernel is built for (beyond, the PyTorch path runs:
#: a row of that width no longer stays in registers).
MAX_WIDTH = 128
#: Largest number of heads (the kernel keeps one vector per head of a node).
MAX_HEADS = 16


def lanes(n: int) -> int:
    r"""The vector width (floats) of a kernel row of ``n`` floats: the next power of two (GCC vector types), at
    least 4; the padding lanes hold zeros."""
    return max(4, 1 << (n - 1).bit_length())


def enabled() -> bool:
    r"""Whether native kernels may be used: ``GEA_GRAPH_NATIVE`` is not ``0`` and the platform is POSIX."""
    return os.environ.get("GEA_GRAPH_NATIVE", "1") != "0" and os.name == "posix"


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _build(source: str, defines: dict[str, int]) -> ctypes.CDLL:
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    flags = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-Wno-psabi"]
    flags += [f"-D{k}={v}" for k, v in defines.items()]
    # -march=native: the widest vectors of this processor (the library never leaves this process).
    arch = ["-mcpu=native"] if platform.machine() in ("arm64", "aarch64") else ["-march=native"]
    with tempfile.TemporaryDirectory(prefix="gea-graph-native-") as tmp:
        src = os.path.join(tmp, "kernel.c")
        lib = os.path.join(tmp, "kernel.so")
        with open(src, "w") as f:
            f.write(source)
        errors = ""
        for extra in (arch, []):
            res = subprocess.run([cc, *flags, *extra, src, "-o", lib, "-lm"], capture_output=True, text=True,
                                 check=False)
            if res.returncode == 0:
                # dlopen maps the file: it may be deleted once loaded.
                return ctypes.CDLL(lib)
            errors = res.stderr.strip()
        raise RuntimeError(f"{cc} failed: {errors[-2000:]}")


def external_units_kernel(head_channels: int, units: int, heads: int) -> ctypes.CDLL | None:
    r"""The fused float32 kernel of GEA's external units (``kernels/external_units.c``) for ``head_channels``
    :math:`d/H`, ``units`` :math:`S` and ``heads`` :math:`H`, or :obj:`None` (disabled, sizes beyond
    :data:`MAX_WIDTH` / :data:`MAX_HEADS`, or no working compiler: warned once per size)."""
    key = (head_channels, units, heads)
    if not enabled() or max(head_channels, units) > MAX_WIDTH or heads > MAX_HEADS:
        return None
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        source = resources.files("gea_graph.nn").joinpath("kernels/external_units.c").read_text()
        defines = {"D": head_channels, "S": units, "H": heads, "VD": lanes(head_channels),
                   "VS": lanes(units)}
        try:
            lib = _build(source, defines)
        except (OSError, RuntimeError) as err:
            warnings.warn(f"gea_graph: the native external-units kernel could not be built ({err}); "
                          "ExternalAttention runs its PyTorch path on CPU", RuntimeWarning, stacklevel=3)
            lib = None
        if lib is not None:
            signatures = {
                "gea_forward_logits": [_I, _I, _I, _P, _P, _P, _P, _P],
                "gea_forward_exp": [_I, _I, _I, _P, _P, _P, _P],
                "gea_forward_out": [_I, _I, _P, _P, _P, _P, _F, _P, _P, _P, _P, _P, _P],
                "gea_backward_s": [_I, _I, _I, _P, _P, _P, _P, _P, _P, _P, _P],
                "gea_backward_x": [_I, _I, _P, _P, _P, _P, _P, _P, _P, _P],
            }
            for name, argtypes in signatures.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = argtypes, None
        _LOADED[key] = lib
        return lib
