"""Static check: the attention head dimension of every recipe is SDPA-friendly (a multiple of 8, which the fused
flash / memory-efficient kernels want on a GPU) or the recipe is listed with its reason in docs/performance.md
("Attention head dimensions"). Paper copies keep the paper's dimensions (fidelity)."""
import re
from pathlib import Path

import pytest

from gea_graph.train import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.stem for p in (ROOT / "models").glob("*.yaml"))


def head_dim(recipe):
    model = recipe.model
    if model.attn is None or model.family == "mpnn":
        return None  # no global attention
    return model.hidden // model.heads


def documented():
    text = (ROOT / "docs" / "performance.md").read_text()
    section = text.split("## Attention head dimensions", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.-]+)` \| (\d+) \| (.+?) \|$", section, flags=re.MULTILINE)
    return {name: (int(dim), reason.strip()) for name, dim, reason in rows}


@pytest.mark.parametrize("name", RECIPES)
def test_head_dimension_is_sdpa_friendly_or_documented(name):
    recipe = load_recipe(name)
    dim = head_dim(recipe)
    listed = documented()
    if dim is None or dim % 8 == 0:
        assert name not in listed, f"{name}: head dim {dim} is fine; drop it from the table"
        return
    assert name in listed, (f"{name}: attention head dimension {dim} is not a multiple of 8; make it one or list the "
                            f"recipe with its reason under 'Attention head dimensions' in docs/performance.md")
    assert listed[name][0] == dim and len(listed[name][1]) > 10, listed[name]
    if recipe.paper is not None:
        assert "paper" in listed[name][1].lower()


def test_table_names_only_recipes():
    assert set(documented()) <= set(RECIPES)
