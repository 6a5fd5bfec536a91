"""Exit codes of the ``tether`` command and the mapping from errors to them.

=====  ==============================================================================
code   meaning
=====  ==============================================================================
0      ok
1      unexpected error; or the run itself failed after ``approve``/``resume``/``fork``
2      already resumed (``AlreadyResumed``): finished, answered, cancelled, or another caller
       won; or the run's status changed since it was confirmed (``RunStatusChangedError``)
3      not found: no such run or checkpoint, or the run waits for no answer
4      bad input: bad options or JSON, ``ChainResumeError``, ``ConfigurationError``,
       ``RunnerMismatchError``
5      the store is unavailable or corrupt (``StoreError``)
=====  ==============================================================================
"""

from __future__ import annotations

from typing import Final

from ..errors import (
    AlreadyResumed,
    ChainResumeError,
    CheckpointNotFoundError,
    ConfigurationError,
    RunnerMismatchError,
    RunNotFoundError,
    RunStatusChangedError,
    SerializationError,
    StoreError,
)

OK: Final = 0
UNEXPECTED: Final = 1
ALREADY_RESUMED: Final = 2
NOT_FOUND: Final = 3
BAD_INPUT: Final = 4
STORE_UNAVAILABLE: Final = 5

_BY_TYPE: Final[tuple[tuple[tuple[type[BaseException], ...], int], ...]] = (
    ((AlreadyResumed, RunStatusChangedError), ALREADY_RESUMED),
    ((RunNotFoundError, CheckpointNotFoundError), NOT_FOUND),
    (
        (ChainResumeError, ConfigurationError, RunnerMismatchError, SerializationError),
        BAD_INPUT,
    ),
    ((StoreError,), STORE_UNAVAILABLE),
)


class CommandError(Exception):
    """A failure the CLI itself detects, with the exit code it maps to.

    Attributes:
        message: the one line printed to stderr.
        exit_code: one of the codes above.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error that escaped a command."""
    if isinstance(exc, CommandError):
        return exc.exit_code
    for types, code in _BY_TYPE:
        if isinstance(exc, types):
            return code
    return UNEXPECTED


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for stderr: its message, prefixed by its type unless it is ours."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, CommandError):
        return text
    return f"{type(exc).__name__}: {text}"
