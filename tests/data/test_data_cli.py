import pytest

from gea_graph.cli import main


def test_data_list_shows_every_dataset(capsys, data_root):
    assert main(["data", "list", "--root", str(data_root)]) == 0
    out = capsys.readouterr().out
    for name in ("zinc", "peptides-func", "peptides-struct", "pcqm4mv2", "pcqm-contact", "pascalvoc-sp", "coco-sp",
                 "tree-r2", "tree-r7"):
        assert name in out
    assert "generated" in out


def test_data_prepare_prints_a_summary(capsys, data_root):
    assert main(["data", "prepare", "tree-r2", "--pe", "lap:2,rw:3", "--root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "76 graphs" in out and "20 graphs" in out and "mean 7.0 nodes" in out and "time:" in out
    assert main(["data", "prepare", "tree", "--depth", "2", "--root", str(data_root)]) == 0
    assert main(["data", "list", "--root", str(data_root)]) == 0
    assert "tree-r2          processed" in capsys.readouterr().out


def test_data_prepare_rejects_unknown_names(capsys, data_root):
    assert main(["data", "prepare", "nope", "--root", str(data_root)]) == 2
    assert "argument name: 'nope' is not known" in capsys.readouterr().err
    # bad input ends in one line and exit code 2 (the traceback only with --debug)
    assert main(["data", "prepare", "tree-r2", "--pe", "bad", "--root", str(data_root)]) == 2
    assert "KIND:N" in capsys.readouterr().err
    with pytest.raises(ValueError, match="KIND:N"):
        main(["--debug", "data", "prepare", "tree-r2", "--pe", "bad", "--root", str(data_root)])
