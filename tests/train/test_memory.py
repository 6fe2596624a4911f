"""The free C heap is handed back to the system during training (gea_graph.train.memory)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gea_graph.train import fit, memory, recipe_from_dict

FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 20, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 8, "layers": 1,
              "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "optim": {"lr": 0.01, "schedule": "cosine"},
    "trainer": {"max_epochs": 1, "batch_size": 2, "seeds": [0], "log_every_n_steps": 1},
}


def test_release_free_heap_on_glibc():
    assert memory.release_free_heap() is (memory.libc_function("malloc_trim") is not None)
    if sys.platform.startswith("linux"):
        assert memory.libc_function("malloc_trim") is not None  # glibc (musl has no malloc_trim: then a no-op)


def test_training_releases_the_heap_every_few_steps_and_around_validation(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    mapped: list[int] = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "release_mapped_pages", lambda: mapped.append(1) or 0)
    recipe = recipe_from_dict(json.loads(json.dumps(FAKE)), name="fake")
    callback = memory.ReleaseFreeHeap(every=4)
    fit(recipe, tmp_path / "run", progress=False, verbose=False, accelerator="cpu", devices=1, callbacks=[callback])
    # 16 training graphs at batch 2: 8 steps -> 2 releases, plus 2 around the validation; the run's own
    # ReleaseFreeHeap (every TRIM_EVERY = 16 steps) releases around the validation only.
    assert callback.calls == 2 + 2
    assert len(calls) == callback.calls + 2
    assert len(mapped) == len(calls)  # the store's pages go with the free heap
    with pytest.raises(ValueError, match="every"):
        memory.ReleaseFreeHeap(every=0)


def test_recipe_sets_how_often_the_run_releases_the_heap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1) or True)
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"]["release_memory_every"] = 3
    fit(recipe_from_dict(raw, name="fake"), tmp_path / "run", progress=False, verbose=False, accelerator="cpu",
        devices=1)
    # 8 steps: releases after steps 3 and 6, plus 2 around the validation.
    assert len(calls) == 2 + 2


def test_a_bound_releases_after_exactly_the_steps_that_leave_more_resident(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    # the resident set after each of the 8 training steps (16 training graphs at batch 2), then after each of the
    # validation's 2 steps (one batch of the 2 val graphs, one of the 2 test graphs)
    readings = [900.0, 1500.0, 1000.0, 1000.0, 2000.0, 1600.0, 999.0, 1001.0]
    evaluation = [1200.0, 800.0]
    read: list[float] = []
    released_after: list[int] = []  # the number of readings when each release came
    monkeypatch.setattr(memory, "resident_mib", lambda: read.append((readings + evaluation)[len(read)]) or read[-1])
    monkeypatch.setattr(memory, "release_free_heap", lambda: released_after.append(len(read)) or True)
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"].update(release_memory_every=None, release_memory_above=1000)
    fit(recipe_from_dict(raw, name="fake"), tmp_path / "run", progress=False, verbose=False, accelerator="cpu",
        devices=1)
    assert read == readings + evaluation  # once after every step, training or evaluation
    # after training steps 2, 5, 6 and 8 (above 1000 MiB); before the validation (after the 8th step); after its
    # val step; after the validation
    assert released_after == [2, 5, 6, 8, 8, 9, 10]


def test_the_bound_holds_in_evaluation(monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "release_mapped_pages", lambda: 0)
    monkeypatch.setattr(memory, "resident_mib", lambda: 3000.0)
    callback = memory.ReleaseFreeHeap(every=2, above_mib=2048)
    callback.on_validation_batch_end(None, None, None, None, 0)
    callback.on_validation_batch_end(None, None, None, None, 1, dataloader_idx=1)
    callback.on_test_batch_end(None, None, None, None, 0)
    assert callback.calls == len(calls) == 3
    monkeypatch.setattr(memory, "resident_mib", lambda: 1000.0)
    callback.on_validation_batch_end(None, None, None, None, 1)  # the interval counts training steps only
    callback.on_test_batch_end(None, None, None, None, 1)
    assert callback.calls == 3


def test_a_bound_of_none_and_no_interval_release_around_the_validation_only(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "resident_mib", lambda: 1e9)
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"]["release_memory_every"] = None
    fit(recipe_from_dict(raw, name="fake"), tmp_path / "run", progress=False, verbose=False, accelerator="cpu",
        devices=1)
    assert len(calls) == 2  # around the validation: no bound, no interval, whatever the resident set


def test_the_bound_and_the_interval_each_release(monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "release_mapped_pages", lambda: 0)
    resident = iter([10.0, 10.0, 50.0, 10.0, 10.0, 10.0])
    monkeypatch.setattr(memory, "resident_mib", lambda: next(resident))
    callback = memory.ReleaseFreeHeap(every=4, above_mib=20)
    for step in range(8):
        callback.on_train_batch_end(None, None, None, None, step)
    # steps 4 and 8 by the interval (no reading needed), step 3 by the bound
    assert callback.calls == len(calls) == 3
    assert next(resident, None) is None
    monkeypatch.setattr(memory, "resident_mib", lambda: None)  # not Linux: the bound has nothing to read
    callback.on_train_batch_end(None, None, None, None, 0)
    assert callback.calls == 3
    assert "above_mib=20" in repr(callback)
    with pytest.raises(ValueError, match="above_mib"):
        memory.ReleaseFreeHeap(above_mib=0)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="statm is Linux's")
def test_resident_mib_reads_this_process_now():
    before = memory.resident_mib()
    ballast = bytearray(256 << 20)  # zero-filled: every page touched
    during = memory.resident_mib()
    del ballast
    assert before is not None and during is not None
    assert during - before > 200
    assert during <= memory.peak_resident_mib() + 1


@pytest.mark.parametrize("above", [0, -5, "2 GiB", True])
def test_release_memory_above_must_be_a_positive_size(above):
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"]["release_memory_above"] = above
    with pytest.raises(ValueError, match="release_memory_above"):
        recipe_from_dict(raw, name="fake")


@pytest.mark.parametrize("every", [0, -1, 2.5, "4"])
def test_release_memory_every_must_be_a_positive_step_count(every):
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"]["release_memory_every"] = every
    with pytest.raises(ValueError, match="release_memory_every"):
        recipe_from_dict(raw, name="fake")


def test_release_memory_settings_are_resumable_and_leave_the_digest():
    from gea_graph.train.run_dir import recipe_changes, recipe_digest

    base = recipe_from_dict(json.loads(json.dumps(FAKE)), name="fake").to_dict()
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"].update(release_memory_every=None, release_memory_above=2048)
    changed = recipe_from_dict(raw, name="fake").to_dict()
    assert recipe_changes(base, changed) == []
    assert recipe_digest(base) == recipe_digest(changed)


def test_the_cli_sets_no_process_wide_allocator_setting():
    # issue 46: process-wide allocator settings leave the library (the perf harness may set its own)
    code = ("import os; os.environ.pop('THP_MEM_ALLOC_ENABLE', None); from gea_graph.cli import main; "
            "main(['--help']); print('THP_MEM_ALLOC_ENABLE' in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "False"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_peak_resident_is_the_programs_own_not_its_parents():
    # A run started by a large process (the bench after building its datasets) must not report that process's size:
    # Linux carries ru_maxrss over across fork and exec, VmHWM starts afresh with the program.
    ballast = b"b" * (1 << 30)
    try:
        probe = ("import resource; from gea_graph.train.memory import peak_resident_mib; "
                 "print(peak_resident_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
        out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120)
    finally:
        del ballast
    ours, maxrss = map(float, out.stdout.split())
    assert maxrss >= 1024  # the trap: the parent's gigabyte
    assert 0 < ours < 900  # this program's imports, not the parent's gigabyte


# Allocates a 16 MiB block twice, touching every page each time, and prints the page faults of the second round:
# with glibc's adaptive thresholds the first block is mapped and unmapped (which raises the threshold) and the
# second comes fresh from the heap's top; with the steady thresholds the first comes from the heap and stays there.
_SECOND_ROUND_FAULTS = """
import ctypes, ctypes.util, resource, sys
if sys.argv[1] == "steady":
    from gea_graph.bench.perf.heap import steady_heap_thresholds
    assert steady_heap_thresholds()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 16 << 20
def touch_and_free():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
touch_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch_and_free()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(memory.libc_function("mallopt") is None, reason="glibc's mallopt")
def test_steady_heap_thresholds_keep_a_freed_block_in_the_heap():
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _SECOND_ROUND_FAULTS, mode], capture_output=True, text=True,
                             check=True, env=env, timeout=120)
        return int(out.stdout)

    pages = (16 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert faults("adaptive") >= pages // 2  # glibc's own thresholds: the second block's pages are fresh
    assert faults("steady") < pages // 8  # the first block's pages are used again


def test_the_perf_suite_runs_with_steady_heap_thresholds(monkeypatch: pytest.MonkeyPatch):
    from gea_graph.bench.perf import suite
    from gea_graph.bench.perf.core import Row, Settings

    calls: list[str] = []
    from gea_graph.bench.perf import heap

    monkeypatch.setattr(heap, "steady_heap_thresholds", lambda: calls.append("heap") or True)
    monkeypatch.setattr(suite, "row_groups", lambda: {"probe": lambda settings: calls.append("row") or
                                                      [Row("probe", 1.0, 1.0, "ms")]})
    suite.run_suite(Settings.tiny(), None, only=["probe"], log=lambda _: None)
    assert calls == ["heap", "row"]
