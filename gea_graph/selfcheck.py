r"""``gea-graph selfcheck``: does this machine train our models correctly? A list of checks, each a pass, a failure
(with the reason) or a skip (what it needs), run on one device.

The checks are a registry (:data:`CHECKS`, in the order they run); a module adds one with :func:`register_check`::

    @register_check("sync census")
    def sync_census(ctx: Context) -> str:
        ...                      # raise (assert) on failure, SkipCheck("needs ...") when it cannot run here
        return "0 host syncs in the model"   # the detail column of a pass

A check gets the :class:`Context`: the device, ``quick``, a scratch folder and a cache shared by the checks (e.g. the
small molecule dataset and the one-process run that the checkpoint and DDP checks share). :func:`run_checks` runs
them and :func:`format_report` prints the table with the environment (device, driver, torch / PyG / Lightning
versions) and the peak memory.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import platform
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from gea_graph.bench.child import child_env, gea_graph_command
from gea_graph.io import write_text

PASS, FAIL, SKIP = "pass", "FAIL", "skip"


class SkipCheck(Exception):
    r"""Raised by a check that cannot run here; the message says what it needs (e.g. two GPUs)."""


@dataclass
class Context:
    r"""What a check runs with: the ``device``, ``quick`` (the CI-sized run), a scratch folder ``workdir`` (deleted
    afterwards) and ``shared``, a cache for what several checks use (see :meth:`cached`)."""

    device: torch.device
    quick: bool
    workdir: Path
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        r"""``make()`` the first time ``key`` is asked for, its value after that."""
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]


@dataclass(frozen=True)
class Check:
    r"""One entry of the registry: its name (the table's first column) and the function that runs it."""

    name: str
    run: Callable[[Context], str]


#: The checks, by name, in the order they run.
CHECKS: dict[str, Check] = {}


def register_check(name: str) -> Callable[[Callable[[Context], str]], Callable[[Context], str]]:
    r"""Decorator that adds ``fn(ctx) -> detail`` to :data:`CHECKS` as ``name`` (after those registered before)."""

    def add(fn: Callable[[Context], str]) -> Callable[[Context], str]:
        if name in CHECKS:
            raise ValueError(f"a selfcheck named {name!r} is already registered")
        CHECKS[name] = Check(name, fn)
        return fn

    return add


@dataclass
class Outcome:
    r"""The result of one check: ``status`` is :data:`PASS`, :data:`FAIL` or :data:`SKIP`; ``detail`` what it
    measured, why it failed or what it needs; ``peak_mib`` the peak GPU memory allocated during it (CUDA only)."""

    name: str
    status: str
    detail: str
    seconds: float
    peak_mib: float | None = None


def resolve_device(name: str) -> torch.device:
    r"""``auto`` (CUDA when available, else CPU), ``cpu`` or ``cuda`` (``cuda:N``); a CUDA device on a machine
    without one is a :class:`ValueError` naming the value."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device; allowed: auto, cpu, cuda (or cuda:N)") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {name!r} is not supported; allowed: auto, cpu, cuda (or cuda:N)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA device is available here (torch {torch.__version__}, "
                         f"built with CUDA {torch.version.cuda})")
    return device


def run_checks(device: torch.device, quick: bool = False, only: Sequence[str] | None = None,
               log: Callable[[str], object] = print) -> list[Outcome]:
    r"""Runs the checks (all, or those named in ``only``) on ``device``; a check that raises fails, one that raises
    :class:`SkipCheck` is skipped, and neither stops the others."""
    unknown = sorted(set(only or ()) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown check {', '.join(map(repr, unknown))}; known: {', '.join(CHECKS)}")
    names = [n for n in CHECKS if only is None or n in only]
    if device.type == "cuda":  # before cuBLAS starts: what deterministic algorithms need (as Lightning sets it)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="gea-graph-selfcheck-") as tmp, _quiet():
        ctx = Context(device, quick, Path(tmp))
        for name in names:
            log(f"[selfcheck] {name} ...")
            if ctx.cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            try:
                status, detail = PASS, CHECKS[name].run(ctx)
            except SkipCheck as why:
                status, detail = SKIP, str(why)
            except Exception as err:  # noqa: BLE001 -- a failing check is a row of the table, not the end
                text = " ".join(str(err).split())[:300]
                status, detail = FAIL, f"{type(err).__name__}: {text}" if text else type(err).__name__
            peak = torch.cuda.max_memory_allocated(device) / 2 ** 20 if ctx.cuda else None
            outcomes.append(Outcome(name, status, detail, time.perf_counter() - start, peak))
            log(f"[selfcheck] {name}: {status} ({outcomes[-1].seconds:.1f} s)")
    return outcomes


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # Lightning's banners and per-run warnings would drown the table.
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "lightning")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# -- environment and report ----------------------------------------------------------------------------------------


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


def environment(device: torch.device) -> dict[str, str]:
    r"""Where the checks ran: the device (GPU name, memory, compute capability, driver, CUDA) or CPU, and the
    versions of Python, torch, PyG, Lightning and gea-graph."""
    import lightning
    import torch_geometric

    import gea_graph

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_geometric": torch_geometric.__version__, "lightning": lightning.__version__,
           "gea_graph": gea_graph.__version__, "cpu": platform.processor() or platform.machine(),
           "cores": str(os.cpu_count())}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device=f"{props.name} ({props.total_memory / 2 ** 30:.0f} GiB, compute capability "
                          f"{props.major}.{props.minor}), {torch.cuda.device_count()} GPU(s)",
                   driver=_driver(), cuda=str(torch.version.cuda))
    else:
        env["device"] = "cpu"
    return env


def peak_memory_mib(device: torch.device) -> tuple[str, float]:
    r"""``("GPU allocated", MiB)`` on CUDA (the largest of the checks), else ``("CPU resident", MiB)`` of this
    process."""
    if device.type == "cuda":
        return "GPU allocated", torch.cuda.max_memory_allocated(device) / 2 ** 20
    from gea_graph.train.memory import peak_resident_mib

    return "CPU resident", peak_resident_mib()


def format_report(outcomes: Sequence[Outcome], env: dict[str, str], peak: tuple[str, float]) -> str:
    r"""The environment, the table of checks and the summary line, as Markdown."""
    lines = ["# gea-graph selfcheck", ""]
    lines += [f"- {key}: {value}" for key, value in env.items()]
    cuda = any(o.peak_mib is not None for o in outcomes)
    lines += ["", "| check | result | seconds |" + (" peak GPU MiB |" if cuda else "") + " detail |",
              "|---|---|---:|" + ("---:|" if cuda else "") + "---|"]
    for o in outcomes:
        mem = f" {o.peak_mib:.0f} |" if cuda and o.peak_mib is not None else (" – |" if cuda else "")
        lines.append(f"| {o.name} | {o.status} | {o.seconds:.1f} |{mem} {o.detail} |")
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, SKIP)}
    lines += ["", f"peak memory ({peak[0]}): {peak[1]:.0f} MiB", "",
              f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"]
    return "\n".join(lines) + "\n"


def report_json(outcomes: Sequence[Outcome], env: dict[str, str], peak: tuple[str, float]) -> str:
    r"""The same as JSON (``--json``): ``environment``, ``peak_memory_mib``, ``checks`` (one object per check)."""
    return json.dumps({"environment": env, "peak_memory_mib": {peak[0]: peak[1]},
                       "checks": [o.__dict__ for o in outcomes]}, indent=2) + "\n"


# -- what the checks share -----------------------------------------------------------------------------------------

#: Recipes of each model family (their variants, tasks and losses), run on random graphs of their data schema.
FAMILY_RECIPES: dict[str, tuple[str, ...]] = {
    "geaet": ("geaet-zinc-quick", "gcn-geanet-peptides-func", "geaet-pascalvoc-sp", "geaet-pcqm-contact",
              "geaet-tree-r2"),
    "mpnn": ("gatedgcn-zinc-cpu", "gcn-zinc-cpu", "gin-zinc", "gine-tree-r2"),
    "graphormer": ("graphormer-zinc-cpu", "graphormer-gfsa-zinc-cpu", "graphormer-plaplacian-zinc-cpu",
                   "graphormer-agf-zinc-cpu"),
    "pyg_gps": ("pyg-gps-zinc",),
    "pyg_gine": ("pyg-gine-zinc",),
}

#: One recipe per loss (l1, bce, wce, ce, rank, and each attention), for the deterministic-algorithms check.
LOSS_RECIPES = ("geaet-zinc-quick", "gcn-geanet-peptides-func", "geaet-pascalvoc-sp", "gine-tree-r2",
                "geaet-pcqm-contact", "graphormer-gfsa-zinc-cpu", "graphormer-agf-zinc-cpu", "pyg-gps-zinc")


def recipe_task(name: str, device: torch.device):
    r"""The :class:`~gea_graph.train.GraphTask` of recipe ``name`` (seeded) on ``device`` and a batch of random
    graphs in its data schema."""
    from gea_graph.models.synthetic import synthetic_batch
    from gea_graph.train import GraphTask, load_recipe

    recipe = load_recipe(name)
    torch.manual_seed(0)
    task = GraphTask(recipe.to_dict()).to(device)
    return task, synthetic_batch(recipe.model, recipe.data.pe, sizes=(5, 9, 7, 6)).to(device)


def training_loss(task, batch) -> torch.Tensor:
    r"""The loss of :meth:`GraphTask.training_step <gea_graph.train.GraphTask.training_step>` (without logging)."""
    from gea_graph.train.metrics import prepare
    from gea_graph.train.module import labelled

    pred, target = labelled(*prepare(task.model(batch), batch, task.task), task.task)
    return task.loss(pred, target) + task.model.aux_loss()


def _gradients(module: torch.nn.Module) -> list[torch.Tensor]:
    # a parameter the loss does not reach (a layer's edge output, unread in a test of that layer alone) counts as 0
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for p in module.parameters() if p.requires_grad]


class CudaNondeterminismAudit(TorchDispatchMode):
    r"""Records the operators (forward and backward) that ``torch.use_deterministic_algorithms(True)`` refuses on
    CUDA tensors, as listed in its documentation (``nll_loss``, float ``cumsum``, ``bincount`` with weights,
    ``histc``, ``scatter_reduce`` with ``prod``, ...), whatever the device: on a CPU it shows what a deterministic GPU
    run would raise on. :attr:`found` holds their names."""

    ALWAYS = frozenset({
        "nll_loss_forward", "nll_loss2d_forward", "histc", "put_", "put", "_ctc_loss_backward",
        "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
        "adaptive_max_pool2d_backward", "fractional_max_pool2d_backward", "fractional_max_pool3d_backward",
        "max_unpool2d", "max_unpool3d", "reflection_pad1d_backward", "reflection_pad2d_backward",
        "reflection_pad3d_backward", "grid_sampler_2d_backward", "grid_sampler_3d_backward",
        "upsample_linear1d_backward", "upsample_bilinear2d_backward", "upsample_bicubic2d_backward",
        "upsample_trilinear3d_backward"})

    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if self._refused(name, func._overloadname, args, kwargs):
            self.found.add(name)
        return func(*args, **kwargs)

    def _refused(self, name: str, overload: str, args: tuple, kwargs: dict) -> bool:
        if name in self.ALWAYS:
            return True
        if name in ("cumsum", "cumsum_"):
            dtype = kwargs.get("dtype") or (args[2] if len(args) > 2 and args[2] is not None else args[0].dtype)
            return dtype.is_floating_point or dtype.is_complex
        if name == "bincount":
            return (args[1] if len(args) > 1 else kwargs.get("weights")) is not None
        if name in ("scatter_reduce", "scatter_reduce_", "index_reduce", "index_reduce_"):
            return (args[4] if len(args) > 4 else kwargs.get("reduce")) == "prod"
        if name in ("median", "nanmedian"):
            return overload.startswith("dim")
        return False


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    r"""``torch.use_deterministic_algorithms(True)`` (with the cuBLAS workspace setting it needs on CUDA, as
    Lightning's ``deterministic=True`` sets it) for the block, then the previous settings."""
    before = torch.are_deterministic_algorithms_enabled()
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


# The small molecule dataset of the loader, checkpoint and DDP checks: 80 / 11 / 9 graphs, so that 10 steps of a
# global batch of 8 split evenly over 2 processes, and the validation split is odd (a padding sampler repeats one).
_SPLITS = (("train", 80), ("val", 11), ("test", 9))


def _molecules() -> list[str]:
    # distinct molecules: a carbon chain, a nitrogen, another chain, a fluorine end (no two the same)
    return [f"{'C' * i}N{'C' * j}F" for i in range(1, 11) for j in range(10)]


def molecule_recipe(ctx: Context) -> tuple[Path, dict[str, Any]]:
    r"""A molecule CSV (100 rows, with a split column) and a tiny GEAET recipe for it (no dropout: runs on one
    and on two processes must agree), written once to the scratch folder; returns the recipe file and dict."""

    def make() -> tuple[Path, dict[str, Any]]:
        rows = ["smiles,score,split"]
        split_names = [s for s, n in _SPLITS for _ in range(n)]
        for k, (smiles, split) in enumerate(zip(_molecules(), split_names)):
            rows.append(f"{smiles},{(k % 10) / 5 - (k // 10) / 7:.4f},{split}")
        table = ctx.workdir / "molecules.csv"
        write_text(table, "\n".join(rows) + "\n")
        raw = {"data": {"csv": str(table), "root": str(ctx.workdir / "data"), "pe": "rw:4",
                        "options": {"smiles_column": "smiles", "target_columns": "score", "split_column": "split"}},
               "model": {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 16,
                         "layers": 2, "heads": 2, "gea_heads": 2, "pe": {"kind": "rw", "size": 4, "dim": 4},
                         "dropout": 0.0, "attn_dropout": 0.0},
               # Adam's eps well above float noise: a parameter whose gradient is 0 up to rounding (a bias before a
               # batch norm) would otherwise step by +-lr at random, and no two runs would agree
               "optim": {"lr": 0.003, "eps": 1e-3, "schedule": "constant"},
               "trainer": {"max_epochs": 1 if ctx.quick else 2, "batch_size": 8, "eval_batch_size": 4,
                           "seeds": [0], "log_every_n_steps": 1}}
        path = ctx.workdir / "selfcheck-molecules.yaml"
        write_text(path, yaml.safe_dump(raw, sort_keys=False))
        return path, raw

    return ctx.cached("molecule_recipe", make)


def accelerator(ctx: Context) -> str:
    return "gpu" if ctx.cuda else "cpu"


#: Torch threads of each CPU process of the DDP check, and of the one-process run it is compared with: with other
#: thread counts, sums of float32 run in another order, and two epochs amplify the rounding gaps past the tolerance.
DDP_CPU_THREADS = 1


def one_process_run(ctx: Context) -> Path:
    r"""The molecule recipe trained by one process on the device (``gea_graph.train.fit``; on a CPU with
    :data:`DDP_CPU_THREADS` threads, as the DDP check's processes); its run folder."""

    def make() -> Path:
        from gea_graph.train import fit, load_recipe

        path, _ = molecule_recipe(ctx)
        out = ctx.workdir / "one-process"
        threads = torch.get_num_threads()
        if not ctx.cuda:  # the threads of the DDP check's processes: CPU kernels sum in an order set by the threads
            torch.set_num_threads(DDP_CPU_THREADS)
        try:
            fit(load_recipe(path), out, accelerator=accelerator(ctx),
                devices=[ctx.device.index or 0] if ctx.cuda else 1, progress=False, verbose=False)
        finally:
            torch.set_num_threads(threads)
        return out

    return ctx.cached("one_process_run", make)


def _python_env() -> dict[str, str]:
    # Subprocesses import the gea_graph of this process (a checkout need not be installed).
    env = child_env()
    env.pop("MASTER_PORT", None)
    return env


def _check_exit(proc: subprocess.CompletedProcess, what: str) -> None:
    # a child command that failed: its exit code and the last lines of its stderr
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise RuntimeError(f"{what} exited with {proc.returncode}: {' | '.join(lines[-3:])}")


def _relative_gap(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


# -- the checks ----------------------------------------------------------------------------------------------------


def _family_check(family: str) -> Callable[[Context], str]:
    def check(ctx: Context) -> str:
        names = FAMILY_RECIPES[family]
        for name in names:
            task, batch = recipe_task(name, ctx.device)
            task.train()
            loss = training_loss(task, batch)
            assert torch.isfinite(loss), f"{name}: loss {float(loss)}"
            loss.backward()
            missing = [n for n, p in task.named_parameters() if p.requires_grad and p.grad is None]
            assert not missing, f"{name}: no gradient for {missing[:3]}"
            bad = [n for n, p in task.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            assert not bad, f"{name}: non-finite gradients in {bad[:3]}"
        return f"{len(names)} recipes ({', '.join(names)}): finite loss, every parameter has a finite gradient"

    check.__doc__ = f"Forward and backward of the {family} family on random graphs of each recipe's schema."
    return check


for _family in FAMILY_RECIPES:
    register_check(f"model: {_family}")(_family_check(_family))


@register_check("deterministic algorithms")
def check_deterministic(ctx: Context) -> str:
    r"""Under ``torch.use_deterministic_algorithms(True)`` (``trainer.deterministic: true``) a training step of every
    loss and attention runs, and two steps from the same state give bitwise-equal gradients. On a CPU, the operators
    that CUDA would refuse are caught too (:class:`CudaNondeterminismAudit`)."""
    audit = CudaNondeterminismAudit()
    with deterministic_algorithms(), audit:
        for name in LOSS_RECIPES:
            task, batch = recipe_task(name, ctx.device)
            task.train()
            grads = []
            for _ in range(2):
                twin = copy.deepcopy(task)
                torch.manual_seed(1)
                training_loss(twin, batch).backward()
                grads.append(_gradients(twin))
            for a, b in zip(*grads):
                assert torch.equal(a, b), f"{name}: two identical steps gave different gradients"
    assert not audit.found, f"operators without a deterministic CUDA kernel: {sorted(audit.found)}"
    where = "on CUDA" if ctx.cuda else "on CPU, CUDA's refusals emulated"
    return f"{len(LOSS_RECIPES)} recipes (losses l1, bce, wce, ce, rank): bitwise-equal gradients twice ({where})"


@register_check("GraphLoader: pinned memory + workers")
def check_loader(ctx: Context) -> str:
    r"""Batches of :class:`~gea_graph.data.GraphLoader` with 2 workers and ``pin_memory`` equal PyG's
    ``DataLoader``'s; on a GPU each batch is pinned as one buffer (every tensor a view of it) and reaches the
    device with ``non_blocking`` copies."""
    from torch_geometric.loader import DataLoader

    from gea_graph.data import GraphLoader
    from gea_graph.train import load_recipe
    from gea_graph.train.data import load_datasets

    path, _ = molecule_recipe(ctx)
    train = load_datasets(load_recipe(path).data)["train"]
    ours = list(GraphLoader(train, batch_size=16, num_workers=2, pin_memory=ctx.cuda))
    reference = list(DataLoader([train[i] for i in range(len(train))], batch_size=16))
    assert len(ours) == len(reference)
    buffers = set()
    for a, b in zip(ours, reference):
        for key in ("x", "edge_index", "edge_attr", "y", "batch", "ptr"):
            assert torch.equal(a[key], b[key]), f"batch field {key} differs from PyG's DataLoader"
        if ctx.cuda:
            tensors = [v for v in a.to_dict().values() if isinstance(v, torch.Tensor)]
            assert all(t.is_pinned() for t in tensors), "a batch tensor is not pinned"
            buffers.add(len({t.untyped_storage().data_ptr() for t in tensors}))
            moved = a.to(ctx.device, non_blocking=True)
            torch.cuda.synchronize(ctx.device)
            assert torch.equal(moved.x.cpu(), b.x)
    if ctx.cuda:
        assert buffers == {1}, f"a batch is pinned in {max(buffers)} pieces, not one buffer"
        return f"{len(ours)} batches from 2 workers equal PyG's; each pinned as one buffer, copied non-blocking"
    return f"{len(ours)} batches from 2 workers equal PyG's (pinning needs a GPU: not checked on a CPU)"


@register_check("data on the device")
def check_data_on_device(ctx: Context) -> str:
    r"""Batches gathered from a split kept on the device (:class:`~gea_graph.data.DeviceSplit`, ``data.on_device``)
    equal the host loader's moved there, field by field, unpadded and padded to fixed shapes; on a GPU, gathering
    and padding make no host sync (``torch.cuda.set_sync_debug_mode("error")``)."""
    import numpy as np

    from gea_graph.data import DeviceSplit
    from gea_graph.data.device import host_ptr
    from gea_graph.train import fixed_size, load_recipe
    from gea_graph.train.data import EpochSampler, load_datasets, make_loader

    path, _ = molecule_recipe(ctx)
    train = load_datasets(load_recipe(path).data)["train"]
    split = DeviceSplit(train, ctx.device)
    shapes = fixed_size.plan_shapes(*fixed_size.graph_sizes(train), batch_size=8)
    kinds = fixed_size.field_kinds(train.batch(range(len(train))))
    order = np.fromiter(EpochSampler(train, seed=0), dtype=np.int64)
    on_device = torch.from_numpy(order).to(ctx.device)  # once an epoch, as DeviceLoader does
    batches = 0
    for start, want in zip(range(0, len(order), 8), make_loader(train, 8, shuffle_seed=0)):
        index = order[start:start + 8]
        shape = fixed_size.choose_shape(shapes, want)
        sync_mode = torch.cuda.get_sync_debug_mode() if ctx.cuda else 0
        if ctx.cuda:
            torch.cuda.set_sync_debug_mode("error")  # a host sync in gathering or padding raises
        try:
            got = split.batch(index, on_device[start:start + 8])
            padded = fixed_size.pad_batch(got, shape, kinds)
        finally:
            if ctx.cuda:
                torch.cuda.set_sync_debug_mode(sync_mode)
        for a, b in ((got, want), (padded, fixed_size.pad_batch(want, shape, kinds))):
            assert sorted(a.keys()) == sorted(b.keys()), "the device batch has other fields"
            for key in b.keys():  # noqa: SIM118 (iterating a Data yields pairs)
                if isinstance(b[key], torch.Tensor):
                    assert a[key].device.type == ctx.device.type, f"field {key} is not on the device"
                    torch.testing.assert_close(a[key].cpu(), b[key], rtol=0, atol=0, equal_nan=True,
                                               msg=f"field {key} differs from the host loader's")
            assert torch.equal(host_ptr(a), b.ptr), "the host-side node offsets differ"
        batches += 1
    where = "no host sync in gathering or padding" if ctx.cuda else "host syncs are checked on a GPU only"
    return f"{batches} batches ({split.nbytes / 2**10:.0f} KiB split) equal the host loader's, padded too; {where}"


@register_check("bf16 autocast vs fp32")
def check_bf16(ctx: Context) -> str:
    r"""The outputs of a model under ``torch.autocast(dtype=torch.bfloat16)`` are within 5% (relative L2 norm) of
    float32's, for GEAET and Graphormer + GFSA, and a bf16 training step is finite."""
    tolerance = 0.05
    gaps = []
    for name in ("geaet-zinc-quick", "graphormer-gfsa-zinc-cpu"):
        task, batch = recipe_task(name, ctx.device)
        task.eval()
        with torch.no_grad():
            reference = task.model(batch).float()
            with torch.autocast(ctx.device.type, dtype=torch.bfloat16):
                low = task.model(batch).float()
        gap = float((low - reference).norm() / reference.norm().clamp_min(1e-12))
        assert gap <= tolerance, f"{name}: bf16 differs from fp32 by {gap:.3g} (relative L2) > {tolerance}"
        task.train()
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16):
            loss = training_loss(task, batch)
        loss.backward()
        assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in _gradients(task)), name
        gaps.append(f"{name} {gap:.1e}")
    return f"relative L2 gap to fp32 ({', '.join(gaps)}) <= {tolerance}; bf16 training steps finite"


def ring_batch(sizes: Sequence[int], channels: int, device: torch.device | str = "cpu", seed: int = 0) -> tuple:
    r"""``(x, edge_index, edge_attr, batch)`` of ring graphs of the given sizes (both directions), random node and
    edge features of :obj:`channels` columns (seeded), on :obj:`device`."""
    gen = torch.Generator().manual_seed(seed)
    edges, batch, offset = [], [], 0
    for g, n in enumerate(sizes):
        src = torch.arange(n)
        dst = (src + 1) % n
        edges.append(torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]) + offset)
        batch += [g] * n
        offset += n
    edge_index = torch.cat(edges, dim=1)
    x = torch.randn(offset, channels, generator=gen)
    edge_attr = torch.randn(edge_index.size(1), channels, generator=gen)
    return x.to(device), edge_index.to(device), edge_attr.to(device), torch.tensor(batch, device=device)


@register_check("torch.compile: GEAET layer")
def check_compile(ctx: Context) -> str:
    r"""``torch.compile(GEAETLayer, fullgraph=True, dynamic=True)`` traces into one graph with no break and its
    outputs and gradients equal eager mode's, over two batch shapes (inductor; on a CPU with ``--quick``,
    ``aot_eager``, which needs no C++ build)."""
    import torch._dynamo as dynamo

    from gea_graph.nn import GEAETLayer

    backend = "aot_eager" if ctx.quick and not ctx.cuda else "inductor"
    rtol, atol = (1e-4, 1e-5) if backend == "aot_eager" else (1e-3, 1e-4)
    torch.manual_seed(0)
    eager = GEAETLayer(16, heads=4).to(ctx.device)
    twin = copy.deepcopy(eager)
    x, ei, ea, b = ring_batch((3, 5, 4), 16, ctx.device)
    dynamo.reset()
    explained = dynamo.explain(twin)(x, ei, ea, b, num_graphs=3, max_num_nodes=5)
    reasons = [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), f"graph breaks: {reasons}"
    dynamo.reset()
    compiled = torch.compile(twin, fullgraph=True, dynamic=True, backend=backend)
    worst = 0.0
    for sizes in ((3, 5, 4), (6, 2, 7, 3)):
        x, ei, ea, b = ring_batch(sizes, 16, ctx.device)
        kwargs = {"num_graphs": len(sizes), "max_num_nodes": max(sizes)}
        for module in (eager, twin):
            module.zero_grad(set_to_none=True)
        outs = [fn(x, ei, ea, b, **kwargs)[0] for fn in (eager, compiled)]
        weight = torch.linspace(-1, 1, outs[0].numel(), device=ctx.device).view_as(outs[0])
        for out in outs:
            (out * weight).sum().backward()
        pairs = [(outs[1], outs[0]), *zip(_gradients(twin), _gradients(eager))]
        for got, want in pairs:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
            worst = max(worst, float((got - want).abs().max()))
    dynamo.reset()
    return f"backend {backend}: 1 graph, 0 breaks; outputs and gradients equal eager (max gap {worst:.1e})"


@register_check("captured step = eager")
def check_captured_step(ctx: Context) -> str:
    r"""A fixed-size training step compiled with ``reduce-overhead`` (one CUDA graph, captured once and replayed on
    new batches of its shape) gives eager mode's loss and gradients to 1e-5 in fp32
    (:func:`gea_graph.train.capture.replay_gap`; on a CPU compiled with ``aot_eager``, no CUDA graph)."""
    from gea_graph.train.capture import replay_gap

    gap, graphs = replay_gap(ctx.device)
    assert graphs == 1, f"{graphs} graphs for one fixed shape"
    how = "1 captured CUDA graph" if ctx.cuda else "1 compiled graph (aot_eager)"
    return f"3 steps, {how}; loss and gradients equal eager (max gap {gap:.1e})"


@register_check("checkpoint: device -> CPU")
def check_checkpoint(ctx: Context) -> str:
    r"""A run of the small molecule recipe on the device (``gea_graph.train.fit``) writes a checkpoint that loads on
    a CPU with ``weights_only=True`` and gives the run's validation metric there."""
    from gea_graph.train import GraphTask, load_checkpoint, load_recipe
    from gea_graph.train.data import load_datasets, make_loader
    from gea_graph.train.metrics import metric_input, prepare

    out = one_process_run(ctx)
    result = json.loads((out / "result.json").read_text())
    ckpt = load_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    task = GraphTask(ckpt["hyper_parameters"]["recipe"])
    task.load_state_dict(ckpt["state_dict"])
    task.eval()
    path, _ = molecule_recipe(ctx)
    metric = task.val_metric
    with torch.no_grad():
        for batch in make_loader(load_datasets(load_recipe(path).data)["val"], 4):
            metric.update(*metric_input(task.metric_name, *prepare(task.model(batch), batch, task.task)))
    value = float(metric.compute())
    tolerance = 5e-3 if ctx.cuda else 1e-6  # the GPU evaluated with TF32 matrix products
    gap = _relative_gap(value, result["val"])
    assert gap <= tolerance, f"on CPU val {value:.6g}, on {result['device']} {result['val']:.6g}"
    return (f"trained on {result['device']} ({result['precision']}); best.ckpt loads on CPU (weights_only), "
            f"val MAE {value:.4f} (relative gap {gap:.0e})")


@register_check("predict: checkpoint on the device")
def check_predict(ctx: Context) -> str:
    r"""``gea-graph predict`` of the molecule run's checkpoint on the device, as users run it (the CLI in its own
    process, SMILES in, CSV out), gives row for row what the Python API (:func:`~gea_graph.inference.load_model`)
    computes on the CPU, featurised as the training set was; an unparsable SMILES keeps its row, with its error."""
    import csv

    import numpy as np

    from gea_graph.inference import load_model

    checkpoint = one_process_run(ctx) / "checkpoints" / "best.ckpt"
    smiles = [*_molecules()[::30], "C1CC"]  # molecules of the recipe's kind, and a ring never closed
    table = ctx.workdir / "predictions.csv"
    cmd = gea_graph_command("predict", str(checkpoint), "--smiles", *smiles, "--device", ctx.device.type, "--out",
                            str(table))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_python_env(), cwd=ctx.workdir, check=False)
    _check_exit(proc, "gea-graph predict")
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["smiles"] for r in rows] == smiles, [r["smiles"] for r in rows]
    assert rows[-1]["score"] == "" and "RDKit cannot parse" in rows[-1]["error"], rows[-1]
    got = np.array([float(r["score"]) for r in rows[:-1]])
    want = load_model(checkpoint).predict(smiles[:-1])
    assert want.valid.all(), want.errors
    tolerance = 5e-3 if ctx.cuda else 1e-5  # GPUs: TF32 matrix products; the CSV keeps 8 significant digits
    gap = max(_relative_gap(a, b) for a, b in zip(got, np.asarray(want)[:, 0]))
    assert gap <= tolerance, f"the CLI on {ctx.device.type} and the API on the CPU differ by {gap:.2g} (relative)"
    return (f"{len(smiles) - 1} molecules predicted on {ctx.device.type} by the CLI = the Python API on the CPU "
            f"(largest relative gap {gap:.0e} <= {tolerance:g}); the unparsable SMILES keeps its row and error")


@register_check("DDP: 2 processes = 1 process")
def check_ddp(ctx: Context) -> str:
    r"""``gea-graph train --devices 2`` (Lightning's DDP with its default strategy: gloo on CPUs, NCCL on GPUs) of
    the small molecule recipe (10 steps an epoch of a global batch of 8, 4 per process) gives the metrics of one
    process: the same global batches, batch norm over the global batch, every validation graph counted once."""
    if ctx.cuda and torch.cuda.device_count() < 2:
        raise SkipCheck(f"needs 2 GPUs (this machine has {torch.cuda.device_count()})")
    path, _ = molecule_recipe(ctx)
    one = one_process_run(ctx)
    two = ctx.workdir / "two-processes"
    cmd = gea_graph_command("train", str(path), "--out", str(two), "--accelerator", accelerator(ctx), "--devices", "2",
                            "--no-progress")
    if not ctx.cuda:
        cmd += ["--threads", str(DDP_CPU_THREADS)]
    for _ in range(3):  # a rendezvous port taken by another process in between: start again
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_python_env(), cwd=ctx.workdir, check=False)
        if proc.returncode == 0 or "address already in use" not in proc.stderr.lower():
            break
    _check_exit(proc, "the 2-process run")
    from gea_graph.train import read_metrics, read_result

    result = read_result(two)
    assert result["world_size"] == 2, result
    tolerance = 5e-3 if ctx.cuda else 1e-4  # GPUs: TF32 matrix products and float atomics
    rows = list(zip(read_metrics(one / "metrics.csv"), read_metrics(two / "metrics.csv")))
    worst = 0.0
    for a, b in rows:
        for key in ("train_loss", "val", "test"):
            gap = _relative_gap(a[key], b[key])
            assert gap <= tolerance, f"epoch {int(a['epoch'])} {key}: 1 process {a[key]:.6g}, 2 processes {b[key]:.6g}"
            worst = max(worst, gap)
    backend = "NCCL" if ctx.cuda else "gloo"
    return (f"{backend}, {len(rows)} epoch(s) of 10 steps: train loss, val and test MAE equal 1 process's "
            f"(largest relative gap {worst:.0e} <= {tolerance:g})")


#: Recipes of the sync census: softmax on the packed rows (GEAET), blocks with Graphormer's bias (GFSA), GEA with the
#: authors' epsilon-free L1 step and LapPE.
SYNC_RECIPES = ("geaet-zinc-quick", "graphormer-gfsa-zinc-cpu", "gatedgcn-geanet-peptides-func")


@register_check("sync census")
def check_sync_census(ctx: Context) -> str:
    r"""A training step (forward and backward) given the batch's host-side sizes makes no host sync in the model
    (:class:`~gea_graph.nn.sync_census.SyncCensus`: ``.item()``, ``nonzero``, boolean masks, ``.cpu()``, ...), for
    each recipe of :data:`SYNC_RECIPES`; the loss's own syncs are listed in the detail."""
    from gea_graph.models.networks import host_sizes
    from gea_graph.models.synthetic import synthetic_batch
    from gea_graph.nn.sync_census import SyncCensus
    from gea_graph.train import GraphTask, load_recipe
    from gea_graph.train.metrics import prepare
    from gea_graph.train.module import labelled

    loss_syncs = []
    for name in SYNC_RECIPES:
        recipe = load_recipe(name)
        torch.manual_seed(0)
        task = GraphTask(recipe.to_dict()).to(ctx.device).train()
        batch = synthetic_batch(recipe.model, recipe.data.pe, sizes=(5, 9, 1, 7, 23, 6))
        sizes = host_sizes(batch)  # on the host, before the batch moves (as the training loop does)
        batch = batch.to(ctx.device)
        with SyncCensus() as model_census:
            out = task.model(batch, **sizes)
            (out.float().sum() + task.model.aux_loss()).backward()
        assert model_census.count == 0, f"{name}: {model_census.count} host syncs in the model:\n" + \
            model_census.report()
        with SyncCensus() as loss_census:
            pred, target = labelled(*prepare(out.detach(), batch, task.task), task.task)
            task.loss(pred, target)
        loss_syncs.append(f"{name.split('-')[0]} {loss_census.count}")
    return (f"0 host syncs in the model's forward and backward ({len(SYNC_RECIPES)} recipes); the loss's: "
            f"{', '.join(loss_syncs)} (the missing-label mask of regression and multi-label tasks)")


@register_check("packed vs dense attention")
def check_packed_attention(ctx: Context) -> str:
    r"""Softmax attention and GFSA called on the packed rows (with the layout ``impl="auto"`` picks for the device)
    equal the dense padded path, outputs and gradients, on graphs of mixed sizes with empty and single-node ones, in
    float32 (and in bfloat16 on a GPU)."""
    from gea_graph.nn.attention import GFSA, AttentionPlan, MultiheadAttention, from_dense, to_dense

    sizes = (3, 0, 1, 17, 5, 0, 2, 40, 1, 6, 6, 90, 11)
    ptr = torch.tensor((0, ) + sizes).cumsum(0).to(ctx.device)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(ctx.device)
    cases = [("softmax", MultiheadAttention, torch.float32), ("gfsa", GFSA, torch.float32)]
    if ctx.cuda:
        cases.append(("softmax", MultiheadAttention, torch.bfloat16))
    details = []
    for name, cls, dtype in cases:
        torch.manual_seed(0)
        module = cls(32, 4).to(ctx.device, dtype)
        x = torch.randn(sum(sizes), 32, device=ctx.device, dtype=dtype)
        outs, grads = [], []
        for packed in (True, False):
            module.zero_grad(set_to_none=True)
            leaf = x.clone().requires_grad_()
            if packed:
                out = module(leaf, AttentionPlan(ptr, leaf.size(0), max(sizes)))
            else:
                dense, mask = to_dense(leaf, batch, batch_size=len(sizes), max_num_nodes=max(sizes))
                out = from_dense(module(dense, mask), mask, leaf.size(0))
            weight = torch.linspace(-1, 1, out.numel(), device=ctx.device, dtype=dtype).view_as(out)
            (out * weight).sum().backward()
            outs.append(out.detach().float())
            grads.append([leaf.grad.float()] + [p.grad.float() for p in module.parameters()])
        tol = 2e-2 if dtype == torch.bfloat16 else (1e-3 if ctx.cuda else 1e-5)  # GPUs: TF32 projections
        gap = 0.0
        for got, want in [(outs[0], outs[1]), *zip(grads[0], grads[1])]:
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=f"{name} {dtype}")
            gap = max(gap, float((got - want).abs().max()))
        kernel = module.resolve_impl(AttentionPlan(ptr, x.size(0), max(sizes)))
        details.append(f"{name} {str(dtype).split('.')[-1]} ({kernel}) {gap:.0e}")
    return "equal to the dense path, outputs and gradients (max gap): " + "; ".join(details)
