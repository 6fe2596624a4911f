"""Where datasets live: the data root and the offline mirror."""

from __future__ import annotations

import os
from pathlib import Path

PathLike = str | os.PathLike


def data_root(root: PathLike | None = None) -> Path:
    """The data root: :obj:`root` if given, else ``$GEA_GRAPH_DATA``, else ``./datasets``."""
    if root is not None:
        return Path(root)
    env = os.environ.get("GEA_GRAPH_DATA")
    return Path(env) if env else Path("datasets")


def mirror_root() -> Path | None:
    """The offline mirror ``$GEA_GRAPH_MIRROR`` (one sub-folder per dataset, laid out as ``shared/data``), or
    :obj:`None` when unset."""
    env = os.environ.get("GEA_GRAPH_MIRROR")
    return Path(env) if env else None
