"""``python -m parley``: the same as the ``parley`` command."""

import sys

from parley.cli import main

sys.exit(main())
