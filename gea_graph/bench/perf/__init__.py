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

Modules, each depending only on those before it: :mod:`~gea_graph.bench.perf.core` (rows, settings,
measurement, reports), :mod:`~gea_graph.bench.perf.data` (the inputs), :mod:`~gea_graph.bench.perf.layers`,
:mod:`~gea_graph.bench.perf.throughput`, :mod:`~gea_graph.bench.perf.pipeline` (the row builders) and
:mod:`~gea_graph.bench.perf.suite` (the groups and :func:`~gea_graph.bench.perf.suite.run_suite`). This
package is apart from the recipe x seed benchmark (:mod:`gea_graph.bench.runner`, ``gea-graph bench``).
"""
