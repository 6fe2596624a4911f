r"""Process-level choices of a run: the precision, the data-loader workers, the peak memory it reports, and the
torch flags it sets (restored afterwards)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from gea_graph.data.store import available_cpus
from gea_graph.train.memory import peak_resident_mib


def resolve_precision(precision: str, accelerator: str) -> str:
    r"""Lightning's precision for a recipe's ``trainer.precision``: ``auto`` is ``32-true`` on every device (on a
    CUDA GPU with TF32 matrix products, see :func:`fit`); bf16 or fp16 is opt-in (``bf16-mixed``, ``16-mixed``, per
    recipe or as the override ``trainer.precision=bf16-mixed``). fp16 asked for on a CPU-only machine falls back to
    ``32-true``; ``bf16-mixed`` runs there with CPU autocast."""
    gpu = torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")
    if precision == "auto" or (not gpu and precision.startswith("16")):
        return "32-true"
    return precision


def default_workers(cuda: bool, processes_per_node: int) -> int:
    r"""Data-loader workers per loader when the recipe leaves ``trainer.num_workers`` unset: on a GPU 2 (fewer when
    the node has under 4 cores per process), so the next batches are gathered and pinned while the GPU computes; on
    a CPU none, as workers would take cores from the training's own threads (a store gathers a batch in one numpy
    gather per column, far less than a training step)."""
    if not cuda:
        return 0
    return max(0, min(2, available_cpus() // max(processes_per_node, 1) - 2))



def peak_memory_mb() -> float:
    r"""Peak memory of this process in MiB: CUDA's peak allocation on a GPU, else the peak resident set size
    (:func:`~gea_graph.train.memory.peak_resident_mib`)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2 ** 20
    return peak_resident_mib()



@contextlib.contextmanager
def torch_flags_kept() -> Iterator[None]:
    # A run sets process-wide flags (deterministic algorithms, TF32 matrix products); the caller's come back after.
    deterministic = torch.are_deterministic_algorithms_enabled()
    matmul = torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_float32_matmul_precision(matmul)

