"""The suites of the published GEAET and GFSA tables: one command per table, every row a recipe with its paper
section."""
import pytest

from gea_graph.bench import suites
from gea_graph.train import load_recipe

ROWS = {"geaet-table2": 30, "geaet-table3-zinc": 6, "geaet-table7": 20, "geaet-table8": 12, "geaet-table9": 5,
        "geaet-table10": 36, "gfsa-zinc": 2, "gfsa-pcqm4mv2": 2}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_table_suite_rows_copy_the_paper(name):
    suite = suites.get_suite(name)
    assert len(suite.recipes) == len(set(suite.recipes)) == ROWS[name]
    for recipe_name in suite.recipes:
        recipe = load_recipe(recipe_name)
        assert recipe.paper is not None, recipe_name
        assert recipe.paper.std is not None and recipe.paper.source, recipe_name
        if name in ("geaet-table7", "geaet-table8"):
            assert recipe.paper.params is not None, recipe_name
        if name == "geaet-table9":
            assert set(recipe.paper.extra) == {"hits@1", "hits@3", "hits@10"} and recipe.model.task == "link_ranking"


def test_table_suites_cover_each_published_row_once():
    # Table 7: 5 head counts x 2 blocks x 2 datasets; Table 2's Peptides GCN+GEANet rows are Table 8's no-PE ones
    t7 = suites.get_suite("geaet-table7").recipes
    assert "geaet-peptides-struct" in t7 and "gcn-transformer-peptides-func-h8" in t7
    assert set(suites.get_suite("geaet-table2").recipes) & set(suites.get_suite("geaet-table8").recipes) == {
        "gcn-geanet-peptides-struct-nope", "gcn-geanet-peptides-func-nope"}
    assert load_recipe("gcn-geanet-peptides-struct-nope").paper.value == 0.2512


def test_list_suites_gives_runs_and_epochs():
    lines = {line.split()[0]: line.split()[1:3] for line in suites.list_suites([0]).splitlines()[1:]}
    assert set(ROWS) <= set(lines)
    assert lines["geaet-table7"] == ["20", "5000"]  # 20 recipes x 1 seed x 250 epochs
