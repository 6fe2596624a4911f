"""Drawing molecules with per-atom scores: formats, errors, and colours where the scores are high."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import matplotlib.image
import numpy as np
import pytest
from ogb.utils import smiles2graph
from ogb.utils.features import atom_to_feature_vector
from rdkit import Chem

from gea_graph.viz.draw import Panel, draw_molecule, draw_panels, format_from_path, to_mol

from .helpers import redness

SMILES = "CC(C)(C)c1ccc2occ(CC(=O)Nc3ccccc3F)c2c1"  # a ZINC molecule


def test_atom_order_is_ogb_node_order():
    mol = Chem.MolFromSmiles(SMILES)
    graph = smiles2graph(SMILES)
    assert graph["num_nodes"] == mol.GetNumAtoms()
    for i, atom in enumerate(mol.GetAtoms()):
        assert list(graph["node_feat"][i]) == atom_to_feature_vector(atom)


def test_coloured_atoms_are_the_high_scoring_ones():
    n = Chem.MolFromSmiles(SMILES).GetNumAtoms()
    scores = np.zeros(n)
    hi, lo = 14, 2  # the amide N (a labelled atom) and a methyl carbon
    scores[hi] = 1.0
    scores[[0, 5, 9]] = 0.5
    pic = draw_molecule(SMILES, scores, title="test", caption="scores are made up")
    assert pic.fmt == "png" and pic.image[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(io.BytesIO(pic.image), format="png")
    assert img.shape[1] == pic.size[0] and img.shape[0] == pic.size[1]
    np.testing.assert_array_equal(pic.scores[0], scores)
    assert redness(pic.image, pic.atom_xy[0][hi]) > 0.5
    assert redness(pic.image, pic.atom_xy[0][lo]) < 0.1
    mid = redness(pic.image, pic.atom_xy[0][5])
    assert 0.1 < mid < redness(pic.image, pic.atom_xy[0][hi])


def test_grid_of_two_scales_and_svg(tmp_path):
    other = "Cn1nc(Br)cc1N"
    panels = [
        Panel(SMILES, np.linspace(0, 1, 24), "a", "GEA"),
        Panel(other, np.linspace(0, 0.1, 8), "b", "self"),
        Panel(other, np.linspace(0, 0.2, 8), "c", "self"),
    ]
    pic = draw_panels(panels, ncols=2, fmt="svg", caption="two scales")
    assert [s.label for s in pic.scales] == ["GEA", "self", "self"]
    assert [s.vmax for s in pic.scales] == pytest.approx([1.0, 0.1, 0.2])
    shared = draw_panels(panels, ncols=2, shared_scale=True)
    assert [s.vmax for s in shared.scales] == pytest.approx([1.0, 0.2, 0.2])
    assert pic.size[0] == 600 and pic.size[1] > 600
    # panels of the second column and second row are placed in their cells
    assert (pic.atom_xy[1][:, 0] > 300).all() and (pic.atom_xy[2][:, 1] > 300).all()
    root = ET.fromstring(pic.image)
    assert root.tag.endswith("svg")
    path = pic.save(tmp_path / "grid.svg")
    assert path.read_text().startswith("<?xml")
    with pytest.raises(ValueError, match="SVG"):
        pic.save(tmp_path / "grid.png")


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="C1CC\\(N"):
        to_mol("C1CC(N")
    with pytest.raises(ValueError, match="3 scores for a molecule with 8 atoms"):
        draw_molecule("Cn1nc(Br)cc1N", [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=".png or .svg"):
        format_from_path("out.jpg")
    assert format_from_path("a/B.SVG") == "svg"
