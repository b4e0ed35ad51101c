"""``python -m flexor``: the same as the ``flexor`` command."""

import sys

from flexor.cli import main

sys.exit(main())
