import subprocess
import sys

import gea_graph
from gea_graph.cli import build_parser


def test_version_and_cli_help():
    assert gea_graph.__version__
    parser = build_parser()
    assert parser.prog == "gea-graph"
    out = subprocess.run(
        [sys.executable, "-m", "gea_graph", "--help"], capture_output=True, text=True, check=True
    )
    assert "gea-graph" in out.stdout
