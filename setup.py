"""The recipes (``models/*.yaml``) travel in the wheel as ``gea_graph/recipes``, so recipe names work outside a
checkout (``gea_graph.train.recipe.packaged_recipe_dir``); everything else is in ``pyproject.toml``."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["gea_graph*"]), "gea_graph.recipes"],
      package_dir={"gea_graph.recipes": "models"}, package_data={"gea_graph.recipes": ["*.yaml"]})
