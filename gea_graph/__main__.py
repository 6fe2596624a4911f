import sys

from gea_graph.cli import main

sys.exit(main())
