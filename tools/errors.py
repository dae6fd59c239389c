"""The root of every error sqlchorus raises for a person to read, and what each means to a caller.

Every error class sqlchorus defines derives from :class:`SqlchorusError` and says, as class
attributes, a short stable ``kind`` (for programs: the REST API's and the MCP tools' error kind),
the command line's ``exit_code`` and a server's ``http_status``. The command line and each server
turn errors into an exit or an answer in one place, from these attributes. Errors that are also
of a standard kind (a bad value, a missing file, a timeout) derive from that too, so code that
catches ``ValueError`` or ``OSError`` still does.
"""

from __future__ import annotations

EXIT_NO_ANSWER = 1
"""Exit code of a command that ran but has no answer (no candidate ran, a question unanswered)."""
EXIT_BAD_INPUT = 2
"""Exit code of a command refused for its input or configuration."""
EXIT_CLUSTER = 3
"""Exit code of a command whose Ray cluster cannot do the work (``--ray``): none at the address,
workers without sqlchorus or of another version, a worker that cannot open a database or use a
model, a lost head."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C, as a shell reports SIGINT."""


class SqlchorusError(Exception):
    """Base of the errors sqlchorus raises: ``kind``, ``exit_code`` and ``http_status`` say
    what each is to a program, the command line and a server."""

    kind = "invalid_request"
    exit_code = EXIT_BAD_INPUT
    http_status = 400
