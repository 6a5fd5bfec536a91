"""The ``tether`` command line: inspect runs, answer interrupts, resume, fork, prune.

Installed with the ``cli`` extra (``pip install 'tether[cli]'``), which brings click and rich;
``import tether`` never imports this package, and this module imports neither until
:func:`main` runs. Commands, options and exit codes are documented in ``docs/cli.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command and return its exit code.

    The console script calls this and exits with the value returned.

    Args:
        argv: the arguments after the program name; default: ``sys.argv[1:]``.

    Returns:
        The exit code: 0 ok, 1 unexpected error (or the run failed), 2 already resumed,
        3 not found, 4 bad input, 5 store unavailable or corrupt (``docs/cli.md``).
    """
    try:
        from ._main import invoke
    except ImportError as exc:
        if exc.name in ("click", "rich") or (exc.name or "").startswith(("click.", "rich.")):
            sys.stderr.write(
                f"tether: the command line needs the cli extra ({exc.name} is missing): "
                "pip install 'tether[cli]'\n"
            )
            return 1
        raise
    return invoke(list(sys.argv[1:] if argv is None else argv))
