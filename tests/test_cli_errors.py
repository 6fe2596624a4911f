"""Every CLI error is one line naming the bad value and what is allowed, with exit code 2 and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gea_graph.cli import main
from gea_graph.data import cache_key

CSV_MODEL = {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 8, "layers": 1}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Inputs of the cases: bad CSVs with their recipes, a damaged cache, a file with a wrong MD5, a checkpoint."""
    tmp = tmp_path_factory.mktemp("cli-errors")
    out: dict[str, str] = {"tmp": str(tmp)}
    for name, text in {"empty": "", "header": "smiles,score\n", "text": "smiles,score\nCCO,1\nCCN,high\n"}.items():
        (tmp / f"{name}.csv").write_text(text)
        recipe = {"data": {"csv": str(tmp / f"{name}.csv"), "root": str(tmp / "data"),
                           "options": {"smiles_column": "smiles", "target_columns": "score"}},
                  "model": CSV_MODEL, "trainer": {"max_epochs": 1, "seeds": [0]}}
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(recipe))
        out[name] = str(tmp / f"{name}.yaml")
    cache = tmp / "zero" / "tree-r2" / "processed" / cache_key(None, None, "seed=0")
    cache.mkdir(parents=True)
    for split in ("train", "test"):
        (cache / f"{split}.pt").write_bytes(b"")
    raw = tmp / "md5" / "zinc" / "raw"
    raw.mkdir(parents=True)
    (raw / "smiles_score.csv").write_text("SMILES,score\nCCO,1\n")
    from gea_graph.train import GraphTask, load_recipe
    from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint

    for name, recipe in [("tree", load_recipe("gin-tree-r2", ["model.hidden=8", "model.layers=1"])),
                         ("zinc", load_recipe("geaet-zinc-quick", ["data.pe=null", "model.pe=null", "model.hidden=8",
                                                                   "model.layers=1"]))]:
        task = GraphTask(recipe.to_dict())
        save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                         RECORD_KEY: checkpoint_record(recipe)}, tmp / f"{name}.ckpt")
    (tmp / "a-file").write_text("x")
    return out


T = ["train", "gin-tree-r2", "--out", "{tmp}/run"]
CASES = [
    ("empty csv", ["train", "{empty}", "--out", "{tmp}/r1"], "empty.csv is empty"),
    ("header-only csv", ["train", "{header}", "--out", "{tmp}/r2"], "header.csv has a header but no rows"),
    ("non-numeric target", ["train", "{text}", "--out", "{tmp}/r3"],
     "text.csv: target column 'score' has non-numeric values in rows [1]"),
    ("zero-byte cache", ["data", "prepare", "tree-r2", "--root", "{tmp}/zero"], "train.pt: "),
    ("md5 failure", ["data", "prepare", "zinc", "--root", "{tmp}/md5"], "MD5 mismatch for"),
    ("heads=0", [*T, "model.heads=0"], "model.heads: 0 is not allowed; it must be an integer in [1, 1024]"),
    ("batch_size=0", [*T, "trainer.batch_size=0"], "trainer.batch_size: 0 is not allowed"),
    ("lr=-1", [*T, "optim.lr=-1"], "optim.lr: -1.0 is not allowed; it must be a finite number in (0, 10)"),
    ("dropout=1.5", [*T, "model.dropout=1.5"],
     "model.dropout: 1.5 is not allowed; it must be a finite number in [0, 1)"),
    ("max_epochs=0", [*T, "trainer.max_epochs=0"], "trainer.max_epochs: 0 is not allowed"),
    ("max_epochs=-1", [*T, "trainer.max_epochs=-1"], "trainer.max_epochs: -1 is not allowed"),
    ("subset=-5", [*T, "data.subset=-5"], "data.subset: -5 is not allowed"),
    ("precision", [*T, "trainer.precision=bogus"], "trainer.precision: 'bogus' is not one of auto"),
    ("data.name", [*T, "data.name=nosuch"], "data.name: 'nosuch' is not a built-in dataset; allowed: zinc"),
    ("pe mismatch", ["train", "geaet-zinc-quick", "data.pe=lap:4", "--out", "{tmp}/r4"],
     "model.pe expects rw:16 positional encodings but data.pe is 'lap:4'"),
    ("threads 0", [*T, "--threads", "0"], "argument --threads: '0' is not allowed; it must be an integer in [1, 4096]"),
    ("unknown option", [*T, "--outt", "x"], "unrecognized arguments: --outt x"),
    ("override after option", ["train", "gin-tree-r2", "--out", "{tmp}/r5", "optim.lr=-1"], "optim.lr: -1.0"),
    ("info nosuch", ["info", "nosuch"], "no recipe named 'nosuch'"),
    ("recipe typo", ["info", "geaet-zink-quick"], "no recipe named 'geaet-zink-quick' in "),
    ("info without a recipe", ["info"], "give a recipe (gea-graph info --list names them)"),
    ("train without a recipe", ["train"], "the following arguments are required: recipe ("),  # not `overrides`
    ("info list and a recipe", ["info", "--list", "geaet-zinc"], "--list takes no recipe"),
    ("viz dataset", ["viz", "{tmp}/tree.ckpt", "--dataset", "nosuch", "--out", "{tmp}/x.png"],
     "argument --dataset: 'nosuch' is not known; it must be one of zinc"),
    ("diagnose out file", ["diagnose", "{tmp}/tree.ckpt", "--dataset", "tree-r2", "--out", "{tmp}/a-file"],
     "argument --out: '{tmp}/a-file' is a file"),
    ("tree depth", ["data", "prepare", "tree", "--depth", "9", "--root", "{tmp}/deep"], "--allow-large"),
    # issue 23, D10: tracebacks and unclear lines of the probe
    ("devices abc", [*T, "--devices", "abc"], "argument --devices: 'abc' is not allowed; it must be auto, a number"),
    ("accelerator tpu", [*T, "--accelerator", "tpu"], "argument --accelerator: 'tpu' is not known"),
    ("devices on the cpu", [*T, "--accelerator", "cpu", "--devices", "-1"],
     "--devices: '-1' is not allowed; it must be a number of processes >= 1 on the CPU"),
    ("pe lap:100000", ["data", "prepare", "tree-r2", "--pe", "lap:100000", "--root", "{tmp}/pe"],
     "N must be in 1..256 for lap (eigenpairs per node)"),
    ("recipe pe lap:100000", [*T, "data.pe=lap:100000"], "N must be in 1..256 for lap"),
    ("viz empty smiles", ["viz", "{tmp}/zinc.ckpt", "--smiles", "", "--out", "{tmp}/x.png"],
     "argument --smiles: '' is not a molecule"),
    ("viz atom outside the vocabulary", ["viz", "{tmp}/zinc.ckpt", "--smiles", "[Xe]", "--kind", "self", "--out",
                                         "{tmp}/x.png"],
     ("SMILES '[Xe]' (input 0): outside the model's vocabulary (ZINC's 28 atom and 4 bond types, encoded as in "
      "Benchmarking-GNNs): atom 0 ([Xe] in the kekulé SMILES) has "
      "type 'Xe', which is not one of the 28 ZINC atom types")),
    ("diagnose a file that is not a checkpoint", ["diagnose", "{tmp}/a-file", "--dataset", "tree-r2", "--out",
                                                  "{tmp}/d"], "is corrupt or not a gea-graph checkpoint"),
    ("bench depths of a suite without depths", ["bench", "--suite", "zinc-cpu-10min", "--depths", "2", "--out",
                                                "{tmp}/b"], "--depths: '2' does not apply to --suite zinc-cpu-10min"),
    ("bench depths the suite lacks", ["bench", "--suite", "tree-depth-cpu", "--depths", "7", "--out", "{tmp}/b"],
     "--depths: '7' is not allowed; it must be among the depths of tree-depth-cpu: 2,3,4"),
    ("tree depth 1", ["data", "prepare", "tree", "--depth", "1", "--root", "{tmp}/t1"],
     "argument --depth: '1' is not allowed; it must be an integer in [2, 16]"),
    ("max-time nan", [*T, "--max-time", "nan"], "argument --max-time: 'nan' is not allowed"),
    ("bench max-time -1", ["bench", "--recipes", "gin-tree-r2", "--max-time", "-1", "--out", "{tmp}/b"],
     "argument --max-time: '-1' is not allowed; it must be a finite number of minutes in (0, 1000000]"),
    ("recipe max_time nan", [*T, "trainer.max_time=.nan"], "trainer.max_time: nan is not allowed"),
    # issue 49, R7: a float overflow, and an empty SMILES called a "path"
    ("max-time 1e308", [*T, "--max-time", "1e308"],
     "argument --max-time: '1e308' is not allowed; it must be a finite number of minutes in (0, 1000000]"),
    ("recipe max_time 1e308", [*T, "trainer.max_time=1e308"], "trainer.max_time: 1e+308 is not allowed"),
    ("predict empty smiles", ["predict", "{tmp}/zinc.ckpt", "--smiles", "", "--out", "{tmp}/p.csv"],
     "argument --smiles: '' is not a SMILES string; it must be a non-empty SMILES string, e.g. CCO"),
    # PyG's GPSConv pads with to_dense_batch: compiling it ended in a 170-line BackendCompilerFailed traceback
    ("compile pyg-gps", ["train", "pyg-gps-zinc", "trainer.compile=true", "--out", "{tmp}/run"],
     "trainer.compile: PyG's GPS example (family pyg_gps) cannot be compiled"),
]


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cli_error_is_one_line_with_exit_code_2(files, capsys, argv, expected):
    argv = [a.format(**files) for a in argv]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expected.format(**files) in err, err
    assert not Path(files["tmp"], "run").exists()


def test_debug_shows_the_traceback(files):
    with pytest.raises(ValueError, match="optim.lr"):
        main(["--debug", "train", "gin-tree-r2", "optim.lr=-1", "--out", f"{files['tmp']}/r6"])


@pytest.mark.parametrize("argv", [["info", "--list"], ["data", "list"]])
def test_a_reader_that_goes_away_is_no_error(argv, tmp_path):
    # `gea-graph info --list | head` ended in "gea-graph info: error: [Errno 32] Broken pipe" (or Python's
    # "Exception ignored ... BrokenPipeError" at exit): a listing cut short by its reader is not the user's error.
    import os
    import subprocess
    import sys

    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
           "GEA_GRAPH_DATA": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "gea_graph", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    proc.stdout.close()  # the reader has gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err  # 128 + SIGPIPE, as `cat` stopped by `head` gives
    assert err == ""
