"""`python -m experiments.compare`: see experiments.compare.cli."""

import sys

from experiments.compare.cli import main

sys.exit(main())
