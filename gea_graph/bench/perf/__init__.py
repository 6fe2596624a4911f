r"""The side-by-side performance suite behind ``gea-graph perf``.

Every row runs *our* code and a *reference* in the same process, on the same inputs and the same
threads, and reports the ratio ``ours / reference`` against the target of the performance issue.
Absolute times on shared machines are noise; ratios measured in one run, with the two sides
interleaved, are not.

Measurement method
------------------
* **Time.** A case is a pair of callables (one step each: forward + backward for layers). After
  ``warmup`` calls of each, the two sides are called alternately ``repeats`` times (the order flips
  every repeat, so slow drift of the machine hits both sides alike); each call is timed with
  :func:`time.perf_counter` (with :func:`torch.cuda.synchronize` around it on CUDA) and the row keeps
  the **median** of each side. Gradients are dropped (``set_to_none``) between calls, outside the
  timed region.
* **Memory.** Peak bytes allocated *during* one step, above what was allocated before it. On CUDA:
  :func:`torch.cuda.max_memory_allocated` after :func:`torch.cuda.reset_peak_memory_stats`. On CPU:
  one extra step under :class:`torch.profiler.profile` with ``profile_memory=True``; the allocator
  events (``[memory]``, signed byte counts) are sorted by time and the running sum's maximum is the
  peak. Both count tensor storage only (no Python or allocator caching overhead).
* **Builds at scale** (the opt-in ``scale`` group, ``gea-graph perf --only scale``;
  :mod:`~gea_graph.bench.perf.scale`). A fresh PCQM4Mv2 replica (:mod:`gea_graph.bench.replica`: the
  mirrored 2k sample repeated to ``scale_rows`` molecules, 20,000 with ``--quick``, else 100,000, in
  OGB's raw layout and split sizes) is written to a temporary folder and copied to a second root.
  Each build runs in a *subprocess* under :func:`gea_graph.bench.measure.measure`: ours is
  ``PCQM4Mv2(root, "train", pe="spd:20:paths=5")`` (every split, shortest paths included, in forked
  workers), the reference OGB's own ``PygPCQM4Mv2Dataset`` processing of the other root (one process,
  featurisation only). Rows: wall seconds; peak memory as the maximum over time of the **sum of PSS
  over the process tree** (sampled every 0.1 s; PSS counts pages shared among our forked workers
  once; the note gives the peak RSS of the largest single process); bytes of the processed folder.
  These three are informational: both subprocesses pay the interpreter's start and imports (seconds,
  and a few hundred MiB per process), which outweigh the data at these sizes; the issue's targets
  (time ≤ 0.5x and memory ≤ 0.25x OGB's) are for the full 3,746,620 rows, measured with
  ``scripts/measure_build.py`` on a replica from ``scripts/make_pcqm4mv2_replica.py`` (its docstring gives the
  commands). Then our :class:`~gea_graph.data.GraphLoader` and PyG's
  :class:`~torch_geometric.loader.DataLoader` (graph by graph) read our built train split in this
  process (batch 256, shuffled, 2 workers, the shortest-path fields): graphs per second over
  ``ceil(1.5 x batches per epoch)`` batches after a warm-up batch, one side after the other
  (ratio informational), and ours against the absolute target of 10,000 graphs/s. Notes give the
  load average.

Modules, each depending only on those before it: :mod:`~gea_graph.bench.perf.core` (rows, settings,
measurement, reports), :mod:`~gea_graph.bench.perf.data` (the inputs), :mod:`~gea_graph.bench.perf.layers`,
:mod:`~gea_graph.bench.perf.attention` (global attention without padding), :mod:`~gea_graph.bench.perf.throughput`,
:mod:`~gea_graph.bench.perf.pipeline`,
:mod:`~gea_graph.bench.perf.compiled`, :mod:`~gea_graph.bench.perf.scale` (the row builders) and
:mod:`~gea_graph.bench.perf.suite` (the groups and :func:`~gea_graph.bench.perf.suite.run_suite`). This
package is apart from the recipe x seed benchmark (:mod:`gea_graph.bench.runner`, ``gea-graph bench``).
"""
