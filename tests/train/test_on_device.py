"""``data.on_device``: a run whose splits are kept on the device (forced with ``true`` on the CPU) learns exactly what
the host loader's run learns, alone and with fixed-size batches; ``auto`` is off on a CPU; bad values are refused."""
import json

import pytest
import torch

from gea_graph.train import fit, load_recipe, read_metrics, recipe_from_dict
from gea_graph.train.data import load_datasets, resident_splits
from gea_graph.train.recipe import RecipeError

from .test_training import FAKE


def _run(tmp_path, raw, name: str) -> tuple[list[dict], dict]:
    out = tmp_path / name
    result = fit(recipe_from_dict(raw, name="fake"), out, progress=False, verbose=False, accelerator="cpu", devices=1)
    return read_metrics(out / "metrics.csv"), result


@pytest.mark.parametrize("fixed", [False, True])
def test_a_run_on_device_batches_gives_the_host_loader_run(tmp_path, fixed):
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"].update(max_epochs=2, fixed_size=fixed)
    host, host_result = _run(tmp_path, {**raw, "data": {**raw["data"], "on_device": False}}, "host")
    raw["data"]["on_device"] = True
    device, device_result = _run(tmp_path, raw, "device")
    assert host_result["data_on_device"] == [] and device_result["data_on_device"] == ["train", "val", "test"]
    assert len(host) == len(device) == 2
    for a, b in zip(host, device):
        for key in ("train_loss", "val", "test", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-6), (key, a, b)


def test_auto_keeps_the_splits_on_the_host_of_a_cpu():
    recipe = recipe_from_dict(json.loads(json.dumps(FAKE)), name="fake")
    assert recipe.data.on_device == "auto"
    splits = load_datasets(recipe.data)
    assert resident_splits(splits, "auto", torch.device("cpu")) == dict.fromkeys(splits)
    assert resident_splits(splits, False, torch.device("cpu")) == dict.fromkeys(splits)
    stored = resident_splits(splits, True, torch.device("cpu"))
    assert [len(stored[s]) for s in splits] == [len(splits[s]) for s in splits]


def test_auto_keeps_a_split_too_large_for_the_free_gpu_memory_on_the_host(monkeypatch):
    from gea_graph.data.device import DeviceSplit, estimated_nbytes

    splits = load_datasets(recipe_from_dict(json.loads(json.dumps(FAKE)), name="fake").data)
    exact = DeviceSplit(splits["train"]).nbytes
    assert 0.5 * exact < estimated_nbytes(splits["train"]) < 2 * exact  # from the first graphs, without the split
    least = min(estimated_nbytes(split) for split in splits.values())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * least, 8 * least))  # 25% < any split
    assert resident_splits(splits, "auto", torch.device("cuda")) == dict.fromkeys(splits)


@pytest.mark.parametrize("value", ["sometimes", "2", "[true]", "0.25"])
def test_a_bad_value_is_refused_in_one_line_naming_the_key(value):
    with pytest.raises(RecipeError) as err:
        load_recipe("geaet-zinc-quick", [f"data.on_device={value}"])
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "data.on_device" in message, message
    assert load_recipe("geaet-zinc-quick", ["data.on_device=false"]).data.on_device is False
