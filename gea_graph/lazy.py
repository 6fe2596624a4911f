r"""Names of a package imported when first used (:pep:`562`), so that importing the package stays cheap: reading a
recipe or listing datasets does not import PyG, Lightning or RDKit.

>>> __getattr__, __dir__ = lazy_exports(__name__, {"build_model": "networks"}, globals())   # doctest: +SKIP
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    r"""The module-level ``__getattr__`` and ``__dir__`` of :obj:`package`: a name in :obj:`where` is taken from the
    sub-module ``package.where[name]`` on first access and kept in :obj:`namespace` (the package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
