"""``python -m tether.cli``: the same as the ``tether`` console script."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
