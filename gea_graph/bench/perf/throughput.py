r"""The two trainers of the training-throughput row: the ZINC GEAET recipe (``models/geaet-zinc.yaml``,
its model, loss, AdamW and gradient clipping, without Lightning's loop) and PyG's GPS example network (the
peer recipe ``models/pyg-gps-zinc.yaml``: :class:`~gea_graph.models.PyGGPS`, Adam, L1 loss), both fed by the
ZINC GEAET recipe's own training loader over the suite's ZINC build."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.nn import Module
from torch.utils.data import DataLoader

RECIPE = "geaet-zinc"
REFERENCE = "pyg-gps-zinc"


class StepTimer:
    r"""Runs training steps of one model from an endless pass over ``loader`` and keeps the seconds
    and graphs of the *timed* steps (:meth:`run` with ``timed=True``). A step is: next batch (to the
    device), forward, loss, backward, optional clipping, optimiser step."""

    def __init__(self, model: Module, loss: Callable[[Module, object], Tensor],
                 optimizer: torch.optim.Optimizer, loader: DataLoader, device: torch.device,
                 clip: float | None = None) -> None:
        self.model = model.to(device).train()
        self.loss = loss
        self.optimizer = optimizer
        self.loader = loader
        self.device = device
        self.clip = clip
        self.seconds = 0.0
        self.graphs = 0
        self._batches: Iterator = iter(())

    def _next(self) -> object:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)

    def _step(self) -> int:
        batch = self._next().to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        self.loss(self.model, batch).backward()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return int(batch.num_graphs)

    def run(self, steps: int, timed: bool = True) -> None:
        """Runs ``steps`` steps; adds their wall time and graphs to the totals when ``timed``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        graphs = sum(self._step() for _ in range(steps))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if timed:
            self.seconds += time.perf_counter() - t0
            self.graphs += graphs

    def graphs_per_second(self) -> float:
        """Throughput of the timed steps so far."""
        return self.graphs / self.seconds if self.seconds > 0 else float("nan")


def recipe_trainer(device: torch.device, root: str | None = None) -> tuple[StepTimer, DataLoader, str]:
    r"""The ZINC GEAET recipe's model and optimiser on its training loader over the ZINC build in ``root`` (default:
    the suite's); returns the trainer, the loader (shared with the reference) and a note (recipe, batch size,
    parameter counts)."""
    from gea_graph.bench.perf.data import ZINC_PE, zinc
    from gea_graph.models import build_model, count_parameters
    from gea_graph.train.data import load_datasets, make_loader
    from gea_graph.train.metrics import loss_fn, prepare, resolve_task
    from gea_graph.train.module import build_optimizer
    from gea_graph.train.recipe import load_recipe

    # The recipe's data section, pointed at the suite's ZINC build (its PEs are a superset of the
    # recipe's RWPE-20; the model reads only what it needs).
    recipe = load_recipe(RECIPE, overrides=[f"data.root={root or zinc().root}", f"data.pe={ZINC_PE}"])
    train = load_datasets(recipe.data)["train"]
    loader = make_loader(train, recipe.trainer.batch_size, shuffle_seed=0)
    torch.manual_seed(0)
    model = build_model(recipe.model)
    loss_name, _ = resolve_task(recipe.model, recipe.trainer.loss, recipe.trainer.metric)
    criterion = loss_fn(loss_name)
    task = recipe.model.task

    def loss(m: Module, batch: object) -> Tensor:
        pred, target = prepare(m(batch), batch, task)
        return criterion(pred, target) + m.aux_loss()

    opt = recipe.optim
    optimizer = build_optimizer(model.parameters(), opt)  # as training builds it
    note = (f"recipe {RECIPE} ({count_parameters(model)} parameters), batch "
            f"{recipe.trainer.batch_size}")
    return StepTimer(model, loss, optimizer, loader, device, opt.clip), loader, note


def reference_trainer(loader: DataLoader, device: torch.device) -> StepTimer:
    r"""PyG's GPS example network (10 x ``GPSConv(GINE)``, width 64, RWPE-20; the recipe ``pyg-gps-zinc``) with
    its optimiser (Adam, lr 1e-3, weight decay 1e-5) and L1 loss, on ``loader``. On a ZINC build with OGB's
    9 atom / 3 bond features instead of the papers' atom and bond types, the example's embeddings become OGB's
    encoders (sums of one embedding per feature)."""
    from gea_graph.models import build_model
    from gea_graph.train.recipe import load_recipe

    first = loader.dataset[0]
    ogb = first.x.dim() == 2 and first.x.size(1) == 9
    overrides = ["model.node_encoder=atom", "model.edge_encoder=bond"] if ogb else []
    recipe = load_recipe(REFERENCE, overrides)
    torch.manual_seed(0)
    model = build_model(recipe.model)

    def loss(m: Module, batch: object) -> Tensor:
        pred = m(batch)
        return torch.nn.functional.l1_loss(pred, batch.y.view(pred.shape).to(pred.dtype))

    opt = recipe.optim
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, weight_decay=opt.weight_decay)
    return StepTimer(model, loss, optimizer, loader, device)


def alternate(ours: StepTimer, reference: StepTimer, steps: int, warmup: int = 3) -> None:
    r"""``warmup`` untimed steps of each, then ``steps`` timed steps of each, one step at a time, alternating, the
    order flipped after every pair, so that both sides run in the same process state (see
    :func:`measure_in_fresh_process`)."""
    for trainer in (ours, reference):
        trainer.run(warmup, timed=False)
    for i in range(steps):
        for trainer in ((ours, reference) if i % 2 == 0 else (reference, ours)):
            trainer.run(1)


def measure_in_fresh_process(root: str, steps: int, device: str) -> dict[str, object]:
    r"""Graphs per second of the ZINC GEAET recipe and of PyG's GPS example on the ZINC build in ``root``, measured
    by a fresh ``python -m gea_graph.bench.perf.throughput`` process (:func:`alternate`): rows run before this one
    leave the process in a state (allocator, thread pools, caches) that slowed one side more than the other."""
    import json
    import subprocess
    import sys

    from gea_graph.bench.child import child_env

    out = subprocess.run([sys.executable, "-m", "gea_graph.bench.perf.throughput", root, str(steps), device,
                          str(torch.get_num_threads())], check=True, capture_output=True, text=True,
                         env=child_env()).stdout
    return json.loads(out.strip().splitlines()[-1])


def _main(argv: list[str]) -> None:
    import json

    root, steps, device, threads = argv[0], int(argv[1]), torch.device(argv[2]), int(argv[3])
    torch.set_num_threads(threads)
    ours, loader, note = recipe_trainer(device, root)
    reference = reference_trainer(loader, device)
    alternate(ours, reference, steps)
    print(json.dumps({"ours": ours.graphs_per_second(), "reference": reference.graphs_per_second(), "note": note}))


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
