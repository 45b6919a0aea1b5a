"""``python -m kubemux.cli``."""

import sys

from . import main

sys.exit(main())
