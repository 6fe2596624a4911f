"""Size bounds and whole SMILES (issue 49, R1 and R5): a molecule beyond the bounds, a 10 MB line or a SMILES with
whitespace inside is refused with its reason before RDKit or a positional encoding sees it, in a dataset build (one
line naming the row and the key) as in featurisation for a model; molecules within the bounds build as before."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from gea_graph.data import Featurizer, InvalidSmilesError, MoleculeCSV, SizeBounds
from gea_graph.data.csv_files import MAX_RECORD_BYTES, read_chunks, records
from gea_graph.data.featurizers import MAX_NODES, read_smiles

GOOD = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN", "CCCl", "OCC(O)CO"]


def test_read_smiles_refuses_long_large_and_split_texts_and_keeps_the_rest():
    bounds = SizeBounds()
    mol, text, reason = read_smiles("C" * 50_000, bounds)  # the 50,000-atom chain: never parsed
    assert mol is None and "50,000 characters, more than the 10,000 allowed" in reason and "max_nodes" in reason
    mol, _, reason = read_smiles("C" * 1_500, bounds)  # short enough to read, too many atoms
    assert mol is None and reason == "1,500 atoms/nodes, more than the bound of 1,000 (max_nodes)"
    assert read_smiles("C" * 1_500, SizeBounds(max_nodes=2_000))[0].GetNumAtoms() == 1_500
    for split in ("CC O", "CC\nO", "CC\tO"):  # RDKit would read "CC" and a name: never a silent ethane
        mol, _, reason = read_smiles(split, bounds)
        assert mol is None and reason.startswith("whitespace") and "'CC'" in reason
    mol, text, reason = read_smiles("  CCO \n", bounds)  # outer whitespace is stripped
    assert mol.GetNumAtoms() == 3 and text == "CCO" and reason is None
    assert read_smiles("", bounds)[2] == read_smiles(None, bounds)[2] == "no SMILES (an empty cell)"
    assert SizeBounds(max_edges=4).graph_reason(3, 6) == "6 directed edges, more than the bound of 4 (max_edges)"
    with pytest.raises(ValueError, match="max_nodes must be at most 4,096"):
        SizeBounds(max_nodes=50_000)
    with pytest.raises(ValueError, match="max_edges must be a positive whole number"):
        SizeBounds(max_edges=0)
    assert MAX_NODES >= 2 * 444  # twice Peptides' largest molecule (datasets/peptides-func.md)


def test_featurizer_gives_reasons_and_graphs_of_the_others():
    featurizer = Featurizer.of_data(name="zinc", options={"features": "ogb"}, pe="lap:4,rw:8")
    inputs = ["C" * 50_000, "CC O", "C" * 1_200, *GOOD]
    out = featurizer.featurize(inputs)
    assert out.rows.tolist() == list(range(3, 3 + len(GOOD)))
    assert "50,000 characters" in out.errors[0] and out.errors[1].startswith("whitespace")
    assert "1,200 atoms/nodes" in out.errors[2]
    alone = featurizer.featurize(GOOD)  # the refused rows change nothing for the others
    for key in ("x", "edge_index", "rw_pe", "lap_eigvec"):
        assert np.array_equal(out.batch(range(len(GOOD)))[key].numpy(), alone.batch(range(len(GOOD)))[key].numpy())
    wider = featurizer.featurize(inputs, SizeBounds(max_nodes=1_500))  # the bound is adjustable
    assert wider.rows.tolist() == [2, *range(3, 3 + len(GOOD))] and int(wider.num_nodes()[0]) == 1_200
    empty = featurizer.featurize([])  # an empty input is an empty table
    assert len(empty.rows) == 0 and empty.errors == {}


def _write(path, rows, header=("smiles", "y")):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_a_dataset_build_names_the_row_beyond_the_bounds_and_the_key_raises_it(tmp_path, data_root):
    rows = [["C" * k + "O", k] for k in range(1, 19)]
    rows.insert(4, ["C" * 1_200, 99])
    path = _write(tmp_path / "m.csv", rows)
    with pytest.raises(InvalidSmilesError, match=r"row 4 \(0-based, header excluded\) is refused: 1,200 atoms/nodes, "
                                                 r"more than the bound of 1,000 \(max_nodes\)") as err:
        MoleculeCSV(data_root, path, "smiles", "y")
    assert "\n" not in str(err.value) and len(str(err.value)) < 400  # one line, the long SMILES shortened
    kept = MoleculeCSV(data_root, path, "smiles", "y", split_fractions=(1.0, 0.0, 0.0), max_nodes=2_000, pe="rw:4")
    assert len(kept) == len(rows) and max(kept.num_nodes_per_graph()) == 1_200  # raised: built, RWPE included
    skipped = MoleculeCSV(data_root, path, "smiles", "y", split_fractions=(1.0, 0.0, 0.0), skip_invalid=True)
    assert len(skipped) == len(rows) - 1
    report = skipped.report_path
    with open(report, newline="") as f:
        (entry,) = list(csv.DictReader(f))
    assert entry["row"] == "4" and "max_nodes" in entry["reason"]


def test_a_ten_megabyte_line_is_one_line_error_in_a_build_and_one_row_when_read(tmp_path, data_root):
    path = tmp_path / "big.csv"
    with path.open("w") as f:
        f.write("id,smiles\n1,CCO\n2," + "C" * 10_000_000 + '\n3,"CC\nO"\n4,CCN\r\n')
    with pytest.raises(ValueError, match=r"big.csv: line 3 has 10,000,002 bytes, more than the 131,072"):
        MoleculeCSV(data_root, path, "smiles", "id")
    (chunk,) = list(read_chunks(str(path), ["id", "smiles"], size=100))
    assert chunk.columns["id"] == ["1", "2", "3", "4"] and chunk.columns["smiles"] == ["CCO", "", "CC\nO", "CCN"]
    assert list(chunk.errors) == [1] and "10,000,002 bytes" in chunk.errors[1]
    # the reader holds at most MAX_RECORD_BYTES of a record, whatever its length
    sizes = [(len(r), full) for r, full, _ in records(io.BytesIO(b"a\n" + b"C" * (3 * MAX_RECORD_BYTES) + b"\nb"))]
    assert sizes == [(1, 1), (MAX_RECORD_BYTES, 3 * MAX_RECORD_BYTES), (1, 1)]


def test_records_split_on_quotes_line_ends_bom_and_blank_lines():
    data = b'\xef\xbb\xbfsmiles,y\r\n"C,C",1\r\n\r\n"a ""q"" \nb",2\nlast,3'
    texts = [r for r, _, _ in records(io.BytesIO(data))]
    assert texts == [b'\xef\xbb\xbfsmiles,y', b'"C,C",1', b'"a ""q"" \nb",2', b"last,3"]
    lines = [line for _, _, line in records(io.BytesIO(data))]
    assert lines == [1, 2, 4, 6]
