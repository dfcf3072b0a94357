"""One exception type for user mistakes: the message says what is wrong and what to do."""

from __future__ import annotations


class InfertuneError(Exception):
    """A mistake in the user's input or environment. The CLI prints it without a traceback, exit 2."""

    exit_code = 2
