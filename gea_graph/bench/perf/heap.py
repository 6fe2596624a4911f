r"""The C heap settings of the performance suite's own process (never of the library or of training)."""
from __future__ import annotations

import ctypes

from gea_graph.train.memory import libc_function

#: glibc's largest adaptive mmap threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``), and the trim threshold
#: its adaptation sets beside it (twice that).
STEADY_MMAP_THRESHOLD = 32 * 2 ** 20
STEADY_TRIM_THRESHOLD = 2 * STEADY_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc's malloc.h)


def steady_heap_thresholds() -> bool:
    r"""Sets glibc's mmap and trim thresholds of this process to where their adaptation ends
    (:data:`STEADY_MMAP_THRESHOLD`, :data:`STEADY_TRIM_THRESHOLD`): the state of a training process once it has
    freed a block of 32 MiB or more, in which a step's tensors of up to 32 MiB come from the heap and stay there.
    Otherwise the thresholds follow what the process freed before, and a timed step pays page faults that depend on
    what ran before it. ``False`` where the C library has no ``mallopt`` (not glibc) or refuses the values."""
    mallopt = libc_function("mallopt")
    if mallopt is None:
        return False
    return all(mallopt(ctypes.c_int(parameter), ctypes.c_int(value)) == 1
               for parameter, value in ((_M_MMAP_THRESHOLD, STEADY_MMAP_THRESHOLD),
                                        (_M_TRIM_THRESHOLD, STEADY_TRIM_THRESHOLD)))
