"""``python -m silvanforge.cli``: the ``forge`` command."""

import sys

from silvanforge.cli import main

sys.exit(main())
