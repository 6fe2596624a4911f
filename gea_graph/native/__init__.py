r"""Native CPU kernels, compiled at first use with the system C compiler and loaded with :mod:`ctypes`.

A kernel is a plain C file in ``gea_graph/native/kernels`` (no Python or PyTorch headers, so it compiles in a
fraction of a second), specialised to the sizes it is called with through ``-D`` constants (which let the
compiler keep a row in vector registers). Each process compiles the variants it needs into a temporary directory,
loads them and deletes the directory at once: nothing is left on disk and no cache can go stale. Where no compiler
is found, compilation fails, or ``GEA_GRAPH_NATIVE=0`` is set, :func:`kernel` returns :obj:`None` and the caller
runs its PyTorch or numpy path (the same results; tests compare the two). Users: GEA's external units
(:mod:`gea_graph.nn.external_attention`), the LapPE DeepSet (:mod:`gea_graph.nn.pe_encoders`), dropout
(:mod:`gea_graph.nn.dropout`) and the shortest paths of :mod:`gea_graph.transforms.spd`.

This room is the lowest of the package: it imports nothing of ``gea_graph``.
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from importlib import resources

import torch

_LOCK = threading.Lock()
_LOADED: dict[tuple, ctypes.CDLL | None] = {}
#: Seconds a compilation may take before the kernel counts as unavailable (a variant takes about 0.2 s).
COMPILE_TIMEOUT_S = 120
#: Widest kernel row (floats) the callers build a kernel for: beyond, a row no longer stays in vector registers and
#: they run their PyTorch path.
MAX_WIDTH = 128
#: ctypes argument types of the kernels' signatures: a pointer, a 64-bit integer, an unsigned 32-bit integer, a float.
POINTER, INT64, UINT32, FLOAT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float


def lanes(n: int) -> int:
    r"""The vector width (floats) of a kernel row of ``n`` floats: the next power of two (GCC vector types), at
    least 4; the padding lanes hold zeros."""
    return max(4, 1 << (n - 1).bit_length())


def padded(w: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    r"""``w`` ``[r, c]`` as a contiguous ``[rows, cols]`` zero-padded copy (a kernel row is a vector of
    :func:`lanes` floats)."""
    out = w.new_zeros(rows, cols)
    out[:w.size(0), :w.size(1)] = w
    return out


def enabled() -> bool:
    r"""Whether native kernels may be used: ``GEA_GRAPH_NATIVE`` is not ``0`` and the platform is POSIX."""
    return os.environ.get("GEA_GRAPH_NATIVE", "1") != "0" and os.name == "posix"


_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.h)"[^\n]*$', re.MULTILINE)


def kernel_text(name: str) -> str:
    r"""The text of ``kernels/<name>`` with each ``#include "<header>.h"`` replaced by that header of the same
    folder (one level: a header includes only system headers). The compiler reads the source on stdin, where a
    quoted include would have no folder to search."""
    folder = resources.files("gea_graph.native").joinpath("kernels")
    return _INCLUDE.sub(lambda m: folder.joinpath(m.group(1)).read_text(), folder.joinpath(name).read_text())


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _build(text: str, defines: dict[str, int | str]) -> ctypes.CDLL:
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    flags = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-Wno-psabi"]
    flags += [f"-D{k}={v}" for k, v in defines.items()]
    # -march=native: the widest vectors of this processor (the library never leaves this process).
    arch = ["-mcpu=native"] if platform.machine() in ("arm64", "aarch64") else ["-march=native"]
    with tempfile.TemporaryDirectory(prefix="gea-graph-native-") as tmp:
        lib = os.path.join(tmp, "kernel.so")
        errors = ""
        for extra in (arch, []):
            # The source goes in on stdin: the library is the only file, and it lives as long as this block.
            try:
                res = subprocess.run([cc, *flags, *extra, "-x", "c", "-", "-o", lib, "-lm"], input=text,
                                     capture_output=True, text=True, check=False, timeout=COMPILE_TIMEOUT_S)
            except subprocess.TimeoutExpired as err:
                raise RuntimeError(f"{cc} took over {COMPILE_TIMEOUT_S} s") from err
            if res.returncode == 0:
                # dlopen maps the file: it may be deleted once loaded.
                return ctypes.CDLL(lib)
            errors = res.stderr.strip()
        raise RuntimeError(f"{cc} failed: {errors[-2000:]}")


def kernel(source: str, defines: Mapping[str, int | str], signatures: Mapping[str, Sequence[type]],
           what: str) -> ctypes.CDLL | None:
    r"""The library built from ``kernels/<source>`` with ``-D<name>=<value>`` for each of ``defines``, its
    functions typed by ``signatures`` (name: ctypes argument types; they return nothing), built once per process,
    set of defines and signatures (a library loaded twice is two handles, each typed as asked); or :obj:`None`
    where native kernels are off or the build fails (warned once per set of defines, naming ``what`` runs
    instead)."""
    if not enabled():
        return None
    key = (source, tuple(sorted(defines.items())), tuple((k, tuple(v)) for k, v in sorted(signatures.items())))
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        try:
            lib = _build(kernel_text(source), dict(defines))
        except (OSError, RuntimeError) as err:
            warnings.warn(f"gea_graph: the native kernel {source} could not be built ({err}); {what}",
                          RuntimeWarning, stacklevel=3)
            lib = None
        if lib is not None:
            for name, argtypes in signatures.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = list(argtypes), None
        _LOADED[key] = lib
        return lib
