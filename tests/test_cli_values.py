"""Every option of every sub-command is checked before any work starts: one line naming the option and the value,
exit code 2 (issue 23, "one way to check a value"). The sub-commands and their options are read from the parser, so a
sub-command added later is walked too; an option without a check (or ``choices``) fails the test, listed by name."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest
import torch

from gea_graph import checks
from gea_graph.cli import build_parser, main, names

#: Bad values of each check (texts as typed; ``{tmp}``: an empty folder, ``{file}``: a file in it). A function
#: gets the options the check was given (``arg(check, **options)``).
BAD = {
    checks.positive_int: ["0", "-1", "x", "1.5", "99999999999"],
    checks.non_negative_int: ["-1", "x", "1.5"],
    checks.seed: ["-1", "x", "4294967296"],
    checks.minutes: ["nan", "inf", "-1", "0", "x", "", "1e308"],
    checks.non_negative_minutes: ["nan", "inf", "-1", "x", "", "1e308"],
    checks.int_list: ["", "x", "1,,2", "-1"],
    checks.devices: ["abc", "0", "-2", "1,1", ""],
    checks.accelerator: ["tpu", "nosuch", *([] if torch.cuda.is_available() else ["gpu", "cuda"])],
    checks.strategy: ["nosuch"],
    checks.output_folder: ["", "{file}"],
    checks.output_file: lambda suffixes=(): ["", "{tmp}", *(["{tmp}/x.jpg"] if suffixes else [])],
    checks.input_file: ["", "{tmp}", "{tmp}/missing.ckpt"],
    checks.text: ["", " ", "a\nb"],
    names.recipe_spec: ["nosuch", "", "{tmp}/missing.yaml"],
    names.recipe_list: ["", ",", "nosuch", "gin-tree-r2,nosuch"],
    checks.override: ["noequals", "=5", "1x=2"],
    names.suite_name: ["nosuch"],
    names.dataset_name: ["nosuch", ""],
    names.split_name: ["nosuch"],
    names.pe_spec: ["lap:100000", "lap:0", "rw:100000", "spd:255", "bogus:3", "lap:x", ""],
    checks.tree_depth: ["1", "0", "17", "x"],
    checks.smiles: ["", "C1CC(N", "not a smiles"],
    checks.smiles_text: ["", " "],
    checks.column: ["", " ", "a\nb"],
    checks.colour_map: ["nosuch"],
    checks.layer_index: ["0", "x"],
    checks.torch_device: ["tpu", "cuda:99", "nosuch"],
    names.perf_group: ["nosuch"],
    names.selfcheck_name: ["nosuch"],
    names.external_reduction: ["nosuch", ""],
}
#: A good value of each check, for the positionals before the one walked.
GOOD = {names.recipe_spec: "gin-tree-r2", checks.input_file: "{file}", names.dataset_name: "zinc"}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(sub-command words, parser)`` of every sub-command, nested ones (``data prepare``) included."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from commands(child, (*path, name))


def checked_options():
    """``(words, action, label, bad values)`` of every option that takes a value, and the options without a check."""
    cases, unchecked = [], []
    for path, parser in commands(build_parser()):
        positionals = [a for a in parser._actions if not a.option_strings
                       and not isinstance(a, argparse._SubParsersAction)]
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)) \
                    or action.nargs == 0:
                continue  # flags take no value
            label = "/".join(action.option_strings) or action.metavar or action.dest
            check = getattr(action.type, "check", None)
            if action.choices is not None:
                bad = ["nosuch"]
            elif check in BAD:
                table = BAD[check]
                bad = table(**getattr(action.type, "options", {})) if callable(table) else table
            else:
                unchecked.append(f"gea-graph {' '.join(path)} {label} (type {getattr(action.type, '__name__', None)})")
                continue
            before = []
            if not action.option_strings:
                for earlier in positionals[:positionals.index(action)]:
                    before.append(GOOD[earlier.type.check])
            for value in bad:
                given = [value] * (action.nargs if isinstance(action.nargs, int) else 1)  # --bench DIR RECIPE: 2
                words = [*path, *before, *given] if not action.option_strings else [*path, action.option_strings[0],
                                                                                      *given]
                cases.append(pytest.param(words, path, label, value, id=f"{' '.join(path)} {label} {value!r}"))
    return cases, unchecked


CASES, UNCHECKED = checked_options()


def test_every_option_of_every_sub_command_has_a_check():
    walked = {" ".join(path) for path, _ in commands(build_parser())}
    assert {"train", "bench", "data prepare", "data list", "info", "predict", "evaluate", "export", "viz", "diagnose",
             "perf", "selfcheck"} <= walked
    assert not UNCHECKED, ("options without a check: give each `type=arg(gea_graph.checks.<check>)` (or `choices`), "
                           "and its check bad values in BAD:\n" + "\n".join(UNCHECKED))
    assert len(CASES) > 100


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not what the option wants")
    return {"tmp": str(tmp_path), "file": str(tmp_path / "a-file")}


@pytest.mark.parametrize(("words", "path", "label", "value"), CASES)
def test_a_bad_value_is_one_line_naming_option_and_value(scratch, capsys, words, path, label, value):
    words = [w.format(**scratch) for w in words]
    value = value.format(**scratch)
    before = sorted(os.listdir(scratch["tmp"]))
    assert main(words) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"gea-graph {' '.join(path)}: error: argument {label}: "), err[0]
    assert repr(value) in err[0], err[0]
    assert sorted(os.listdir(scratch["tmp"])) == before  # nothing was started


def test_debug_shows_the_traceback_of_a_refused_value():
    with pytest.raises(checks.BadValue,
                       match=re.escape("'nan' is not allowed; it must be a finite number of minutes in (0, 1000000]")):
        main(["--debug", "train", "gin-tree-r2", "--max-time", "nan"])


def test_the_checks_accept_what_they_should():
    # the guarded features: good values pass and are converted
    assert checks.minutes("2.5") == 2.5 and checks.seed("4294967295") == 2 ** 32 - 1
    assert checks.devices("auto") == "auto" and checks.devices("2") == 2 and checks.devices("0,1") == [0, 1]
    assert checks.devices("-1") == -1 and checks.int_list("0, 1,2") == [0, 1, 2]
    assert names.pe_spec("lap:10:norm=none:trivial=keep:pad=nan,rw:256,spd:20:paths=5")
    assert checks.tree_depth("7") == 7 and checks.layer_index("-1") == -1 and checks.smiles("[Xe]") == "[Xe]"
    assert checks.name("gcn-zinc-cpu") == "gcn-zinc-cpu" and checks.accelerator("cpu") == "cpu"
    assert checks.strategy("ddp") == "ddp" and checks.output_file("a.png", "", (".png",)) == Path("a.png")
    for bad in ("../x", "/abs", "a/b", ".hidden", "-x", "", "x" * 200):
        with pytest.raises(checks.BadValue, match="one path component"):
            checks.name(bad, "name")
