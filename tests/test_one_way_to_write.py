"""Every file the toolkit writes goes through gea_graph.io (issue 23): a scan of the sources for any other
way to write, and the helper's own promises (no link followed, nothing half-written, the umask's permissions)."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from gea_graph import io as files

REPO = Path(__file__).resolve().parents[1]
HELPER = REPO / "gea_graph" / "io.py"
#: Context managers of the helper whose ``as`` name may be written to by a library (torch.save, np.savez).
HELPER_TARGETS = {"exclusive_temporary", "atomic_write"}
#: Methods that write, wherever their target is (the helper's functions of the same names are not methods).
WRITERS = {"write_text", "write_bytes", "savefig", "to_csv", "extractall", "symlink_to", "hardlink_to"}
#: Functions of these modules that write.
MODULE_WRITERS = {"shutil": {"copyfile", "copy", "copy2", "copytree", "move"}, "tempfile": {"mkstemp", "mkdtemp"}}
#: Calls whose destination argument (position) must be a name the helper gave.
DESTINATION = {("torch", "save"): 1, ("np", "save"): 0, ("np", "savez"): 0, ("np", "savez_compressed"): 0}
#: Known exceptions, each with its reason.
ALLOWED = {
    ("gea_graph/bench/perf/scale.py", "copytree"): "copies scratch data inside its own TemporaryDirectory",
}


def _mode(call: ast.Call) -> str:
    # open(path, mode), gzip.open(path, mode), but Path(...).open(mode)
    method = isinstance(call.func, ast.Attribute) and _name(call.func.value) not in ("gzip", "bz2", "lzma", "io")
    args = [*call.args[0 if method else 1:][:1], *(k.value for k in call.keywords if k.arg == "mode")]
    return "".join(a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str))


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def writes_outside_the_helper(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    given = {a.arg for node in ast.walk(tree) if isinstance(node, ast.Lambda) for a in node.args.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _name(call.func) in HELPER_TARGETS and isinstance(
                        item.optional_vars, ast.Name):
                    given.add(item.optional_vars.id)
    found = []
    rel = str(path.relative_to(root))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        where = f"{rel}:{node.lineno}: {ast.unparse(node)[:90]}"
        if (rel, name) in ALLOWED:
            continue
        if name == "open" and isinstance(node.func, (ast.Name, ast.Attribute)) and not (
                isinstance(node.func, ast.Attribute) and _name(node.func.value) == "os"):
            if set(_mode(node)) & set("wax+"):
                found.append(where)
        elif name == "open":  # os.open(..., O_CREAT | O_WRONLY ...)
            if any(flag in ast.unparse(node) for flag in ("O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND")):
                found.append(where)
        elif not isinstance(node.func, ast.Attribute):
            continue
        elif (name in WRITERS and _name(node.func.value) != "files"
              or name in MODULE_WRITERS.get(_name(node.func.value), ())):
            found.append(where)
        elif (_name(node.func.value), name) in DESTINATION:
            position = DESTINATION[_name(node.func.value), name]
            target = node.args[position] if len(node.args) > position else None
            if not (isinstance(target, ast.Name) and target.id in given):
                found.append(where)
    return found


def test_no_file_is_written_outside_the_one_helper():
    sources = sorted([*REPO.joinpath("gea_graph").rglob("*.py"), *REPO.joinpath("scripts").glob("*.py")])
    assert len(sources) > 50
    found = [hit for path in sources if path != HELPER for hit in writes_outside_the_helper(path)]
    assert not found, "write through gea_graph.io instead:\n" + "\n".join(found)


def test_the_scan_finds_the_ways_to_write(tmp_path):
    # the scan itself must see every way it is meant to catch (a scan that finds nothing proves nothing)
    sample = tmp_path / "sample.py"
    sample.write_text("import torch, numpy as np\nfrom pathlib import Path\n"
                      "open('x', 'w')\nPath('x').open('a')\nPath('x').write_text('t')\nfig.savefig('p.png')\n"
                      "torch.save(obj, 'x.pt')\nnp.save(Path('x'), a)\nos.open('x', os.O_CREAT | os.O_RDWR)\n"
                      "with exclusive_temporary('x') as tmp:\n    torch.save(obj, tmp)\n"
                      "open('x')\nopen('x', 'rb')\n")
    hits = writes_outside_the_helper(sample, tmp_path)
    assert [int(h.split(":")[1]) for h in hits] == [3, 4, 5, 6, 7, 8, 9]


def test_writes_replace_planted_links_and_keep_the_old_file_on_failure(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "report.md"
    target.symlink_to(victim)
    files.write_text(target, "new")
    assert victim.read_text() == "precious" and not target.is_symlink() and target.read_text() == "new"
    with pytest.raises(RuntimeError), files.atomic_write(target) as f:
        f.write("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "victim"]
    with pytest.raises(IsADirectoryError, match="is a folder"):
        files.write_text(tmp_path, "x")


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo"])
def test_append_and_lock_refuse_links_and_special_files(tmp_path, plant):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "train.log"
    if plant == "symlink":
        path.symlink_to(victim)
    elif plant == "hardlink":
        os.link(victim, path)
    else:
        os.mkfifo(path)
    with pytest.raises(files.UnsafeFileError, match="train.log is (a|not a)"):
        files.append_to(path)
    with pytest.raises(files.UnsafeFileError, match="train.log is (a|not a)"), files.hold_lock(path):
        pass
    assert victim.read_text() == "precious"
    path.unlink()
    with files.append_to(path) as log:  # the guarded feature
        log.write("line\n")
    with files.append_to(path) as log:
        log.write("more\n")
    assert path.read_text() == "line\nmore\n"


def test_folders_and_files_follow_the_umask(tmp_path):
    before = os.umask(0o027)
    try:
        files.write_text(tmp_path / "a.txt", "x")
        with files.temporary_folder(tmp_path / "store") as tmp:
            files.write_bytes(Path(tmp) / "col.npy", b"x")
        with files.append_to(tmp_path / "log") as log:
            log.write("x")
    finally:
        os.umask(before)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")}
    assert modes == {"a.txt": 0o640, "store": 0o750, "col.npy": 0o640, "log": 0o640}
