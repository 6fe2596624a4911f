"""A tampered or corrupted checkpoint is refused in one line naming the file and the field, by every command that
reads one (``train --resume`` included), before anything is built or written (issue 49, R2, R3 and R7): recorded
sizes that its weights do not have, flipped bytes in a weight tensor, a PE spec that is not a string or not the one
its model reads, an unsafe pickle (never with torch's advice to load it unsafely). A valid checkpoint still loads
and predicts, and an intact run still resumes."""

from __future__ import annotations

import json
import resource
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import gea_graph
from gea_graph.cli import main
from gea_graph.train import CheckpointError
from gea_graph.train.checkpoint import DIGEST_KEY, RECORD_KEY, UncheckedWeightsWarning, weights_digest
from gea_graph.train.run import PAUSED_EXIT_CODE

from .conftest import ZINC_RUN, save_untrained

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"]


def commands(path: Path, out: Path) -> dict[str, list[str]]:
    """Every command that reads a checkpoint, with the arguments of a valid use."""
    return {
        "predict": ["predict", str(path), "--smiles", *SMILES, "--out", str(out / "p.csv")],
        "evaluate": ["evaluate", str(path), "--dataset", "zinc", "--split", "test", "--out", str(out / "e.json")],
        "export": ["export", str(path), "--out", str(out / "m.pt2")],
        "viz": ["viz", str(path), "--smiles", "CCO", "--out", str(out / "v.png")],
        "diagnose": ["diagnose", str(path), "--dataset", "zinc", "--graphs", "8", "--out", str(out / "d")],
    }


def refused_by_every_command(path: Path, tmp_path: Path, capsys, *expected: str) -> None:
    """Each command exits 2 with one line on stderr that names the file and holds :obj:`expected`; it writes
    nothing."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    for name, argv in commands(path, out).items():
        assert main(argv) == 2, name
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1, (name, err)
        assert str(path) in err[0] and all(text in err[0] for text in expected), (name, err[0])
        assert "weights_only=False" not in err[0] and "Traceback" not in err[0]
    assert not any(out.iterdir())


def predicts(path: Path, tmp_path: Path, capsys) -> np.ndarray:
    """The guarded feature: the checkpoint loads (API) and predicts (CLI), finite values for valid SMILES."""
    values = gea_graph.load_model(path).predict(SMILES).values
    assert values.shape == (3, 1) and np.isfinite(values).all()
    assert main(["predict", str(path), "--smiles", *SMILES, "--out", str(tmp_path / "ok.csv")]) == 0, \
        capsys.readouterr().err
    return values


def with_recipe(source: Path, path: Path, **model: object) -> Path:
    """A copy of :obj:`source` whose recorded recipe has these ``model`` values (its weights untouched)."""
    ckpt = torch.load(source, weights_only=True)
    recipe = ckpt["hyper_parameters"]["recipe"]
    recipe["model"] = {**recipe["model"], **model}
    torch.save(ckpt, path)
    return path


def flip_weight_bytes(path: Path, count: int = 64) -> str:
    """Flips :obj:`count` bytes in the middle of the stored bytes of the checkpoint's largest weight tensor, in
    place in the zip (as a bad disk or transfer would: torch does not check the zip's checksums); returns its
    name."""
    state = torch.load(path, weights_only=True)["state_dict"]
    key, weight = max(state.items(), key=lambda item: item[1].numel())
    raw = weight.contiguous().numpy().tobytes()
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and archive.read(i) == raw)
    assert info.compress_type == zipfile.ZIP_STORED and info.file_size >= count
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
        start = info.header_offset + 30 + name_length + extra_length + (info.file_size - count) // 2
        f.seek(start)
        data = f.read(count)
        f.seek(start)
        f.write(bytes(b ^ 0xA5 for b in data))
    return key


def test_recorded_sizes_its_weights_do_not_have_are_refused_before_building(zinc_run, tmp_path, capsys):
    """R2: a real checkpoint (a few MB) whose recipe says hidden=65536, layers=1000; refused in one line naming the
    field, without allocating what the recipe claims."""
    source = zinc_run / "checkpoints" / "best.ckpt"
    huge = with_recipe(source, tmp_path / "huge.ckpt", hidden=65536, layers=1000)
    wide = with_recipe(source, tmp_path / "wide.ckpt", hidden=65536)  # the layer count right: the shapes compared
    assert huge.stat().st_size < 20 * 2 ** 20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match=r"its recorded model.layers=1000 does not match its weights, which "
                                              r"hold 1 layers"):
        gea_graph.load_model(huge)
    with pytest.raises(CheckpointError, match=r"its recorded model.hidden=65536 does not match its weights "
                                              r"\(model\.\S+ is \[[\d, ]+\] in the file, \[[\d, ]*6553\d[\d, ]*\] by "
                                              r"the recipe\)"):
        gea_graph.load_model(wide)
    refused_by_every_command(huge, tmp_path, capsys, "model.layers=1000")
    refused_by_every_command(wide, tmp_path, capsys, "model.hidden=65536")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # KiB
    assert grown < 2 ** 20, f"loading the tampered checkpoints grew the peak memory by {grown / 2 ** 10:.0f} MiB"
    predicts(source, tmp_path, capsys)


def test_corrupted_weight_bytes_are_refused(zinc_run, tmp_path, capsys):
    """R3: 64 flipped bytes inside a weight tensor's storage; torch itself loads the file silently (the control),
    the digest recorded at save time refuses it."""
    source = zinc_run / "checkpoints" / "best.ckpt"
    good = torch.load(source, weights_only=True)
    assert good[RECORD_KEY][DIGEST_KEY] == weights_digest(good["state_dict"])  # written by training itself
    path = tmp_path / "flipped.ckpt"
    shutil.copyfile(source, path)
    key = flip_weight_bytes(path)
    bad = torch.load(path, weights_only=True)  # the control: no error, other weights
    assert not torch.equal(bad["state_dict"][key], good["state_dict"][key])
    with pytest.raises(CheckpointError, match=r"is corrupted: its weights do not match the digest recorded when it "
                                              r"was written \(gea_graph.weights_sha256\)"):
        gea_graph.load_model(path)
    refused_by_every_command(path, tmp_path, capsys, "is corrupted", "gea_graph.weights_sha256")
    before = predicts(source, tmp_path, capsys)
    np.testing.assert_array_equal(before, gea_graph.load_model(source).predict(SMILES).values)


def test_a_checkpoint_without_a_digest_loads_with_a_warning(zinc_run, tmp_path):
    """Checkpoints written before the digest: loaded (their predictions unchanged), with one warning that their
    weights cannot be checked."""
    source = zinc_run / "checkpoints" / "best.ckpt"
    ckpt = torch.load(source, weights_only=True)
    del ckpt[RECORD_KEY][DIGEST_KEY]
    torch.save(ckpt, tmp_path / "old.ckpt")
    with pytest.warns(UncheckedWeightsWarning, match="carries no digest of its weights"):
        old = gea_graph.load_model(tmp_path / "old.ckpt")
    np.testing.assert_array_equal(old.predict(SMILES).values, gea_graph.load_model(source).predict(SMILES).values)


def test_a_pe_spec_that_is_not_a_string_is_refused(zinc_run, tmp_path, capsys):
    """R7: the recorded PE spec 8 (an int): one line naming the file and the field, no traceback."""
    source = zinc_run / "checkpoints" / "best.ckpt"
    ckpt = torch.load(source, weights_only=True)
    ckpt[RECORD_KEY]["featurizer"]["pe"] = 8
    torch.save(ckpt, tmp_path / "pe-int.ckpt")
    with pytest.raises(CheckpointError, match=r"its field gea_graph.featurizer.pe is 8 \(a int\), not a PE spec"):
        gea_graph.load_model(tmp_path / "pe-int.ckpt")
    refused_by_every_command(tmp_path / "pe-int.ckpt", tmp_path, capsys, "gea_graph.featurizer.pe")
    predicts(source, tmp_path, capsys)


def test_a_pe_spec_its_model_does_not_read_is_refused_at_load(tmp_path, capsys):
    """R7: rw:8 recorded for an RWPE-16 model is refused when loading, not mid-run."""
    rwpe16 = [*ZINC_RUN[4:6], "data.pe=rw:16", "model.pe.kind=rw", "model.pe.size=16", "model.pe.dim=4"]
    path = save_untrained("geaet-zinc-quick", rwpe16, tmp_path / "rwpe16.ckpt")
    ckpt = torch.load(path, weights_only=True)
    assert ckpt[RECORD_KEY]["featurizer"]["pe"] == "rw:16"
    ckpt[RECORD_KEY]["featurizer"]["pe"] = "rw:8"
    torch.save(ckpt, tmp_path / "rw8.ckpt")
    with pytest.raises(CheckpointError, match=r"its recorded PE spec gea_graph.featurizer.pe='rw:8' does not fit its "
                                              r"model \(model.pe expects rw:16"):
        gea_graph.load_model(tmp_path / "rw8.ckpt")
    refused_by_every_command(tmp_path / "rw8.ckpt", tmp_path, capsys, "gea_graph.featurizer.pe='rw:8'")
    trained = gea_graph.load_model(path)
    assert trained.featurizer.pe == "rw:16" and trained.graphs(["CCO"])[0].rw_pe.shape == (3, 16)
    predicts(path, tmp_path, capsys)


def test_an_unsafe_checkpoint_is_refused_without_recommending_an_unsafe_load(zinc_run, tmp_path, capsys):
    """R7: torch's refusal of a pickled object advises retrying with weights_only=False; the message keeps only
    what was refused."""

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(tmp_path / 'marker')!r}, 'w').write('x')",))

    ckpt = torch.load(zinc_run / "checkpoints" / "best.ckpt", weights_only=True)
    torch.save({**ckpt, "payload": Payload()}, tmp_path / "evil.ckpt")
    with pytest.raises(CheckpointError) as refused:
        gea_graph.load_model(tmp_path / "evil.ckpt")
    message = str(refused.value)
    assert "\n" not in message and "weights_only" not in message and "Re-running" not in message
    assert "a safe, weights-only load refuses" in message and "exec)" in message
    refused_by_every_command(tmp_path / "evil.ckpt", tmp_path, capsys, "refuses")
    assert not (tmp_path / "marker").exists()


#: A tiny recipe on PyG's FakeDataset (no download, seconds per epoch).
FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 40, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 8, "layers": 1,
              "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "optim": {"lr": 0.01, "schedule": "cosine"},
    "trainer": {"max_epochs": 2, "batch_size": 8, "seeds": [0], "log_every_n_steps": 1, "max_time": None},
}


def run_files(out: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_resume_refuses_a_corrupted_or_tampered_checkpoint_and_resumes_an_intact_one(tmp_path, capsys):
    """R2 and R3 for ``train --resume``: refused in one line, nothing in the run directory written; training writes
    the digest (through Lightning's checkpoint IO), and the intact checkpoint resumes to the end."""
    recipe = tmp_path / "fake.yaml"
    recipe.write_text(yaml.safe_dump(FAKE))
    out = tmp_path / "run"
    argv = ["train", str(recipe), "--out", str(out), "--no-progress", "--accelerator", "cpu"]
    assert main([*argv, "--stop-after", "0"]) == PAUSED_EXIT_CODE, capsys.readouterr().err  # cut after epoch 1
    capsys.readouterr()
    last = out / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt[RECORD_KEY][DIGEST_KEY] == weights_digest(ckpt["state_dict"])  # stamped when Lightning saved it
    intact = tmp_path / "intact.ckpt"
    shutil.copyfile(last, intact)
    flipped = tmp_path / "flipped.ckpt"
    shutil.copyfile(last, flipped)
    flip_weight_bytes(flipped)
    for bad, expected in [(flipped, "is corrupted: its weights do not match the digest recorded when it was written"),
                          (with_recipe(intact, tmp_path / "huge.ckpt", hidden=65536, layers=1000),
                           "model.hidden: 65536 -> 8")]:
        shutil.copyfile(bad, last)
        before = run_files(out)
        assert main([*argv, "--resume"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and expected in err[0] and str(out) in err[0], err
        assert run_files(out) == before  # nothing written
    shutil.copyfile(intact, last)
    assert main([*argv, "--resume"]) == 0, capsys.readouterr().err
    assert json.loads((out / "result.json").read_text())["epochs"] == 2
