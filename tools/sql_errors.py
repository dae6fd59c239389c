"""The errors of the guarded SQL path, each with a short stable ``kind`` and a message for a person."""

from __future__ import annotations

from sqlchorus.tools.errors import SqlchorusError


class SqlError(SqlchorusError):
    """Base of every error the guard raises. ``kind`` is a short stable name for the failure."""

    kind = "sql_error"

    def __init__(self, message: str, *, sql: str | None = None):
        super().__init__(message)
        self.message = message
        self.sql = sql


class DatabaseOpenError(SqlError):
    """The database file is missing, unreadable, or not a SQLite database."""

    kind = "database_open"


class NotAQueryError(SqlError):
    """The text is not exactly one read-only query (parse check)."""

    kind = "not_a_query"


class SqlTooLongError(NotAQueryError):
    """The SQL text is longer, or has more tokens, than any query needs."""

    kind = "too_long"


class SqlTooDeepError(NotAQueryError):
    """The SQL text nests deeper than any query needs."""

    kind = "too_deep"


class ForbiddenError(SqlError):
    """The authorizer refused an operation other than reading, or a function not allowed."""

    kind = "forbidden"


class QueryTimeoutError(SqlError):
    """The statement ran past its time budget and was stopped."""

    kind = "timeout"


class ResourceError(SqlError):
    """The statement needed more memory, or a larger value, than the guard allows."""

    kind = "resource"


class ExecutionError(SqlError):
    """SQLite reported an error while preparing or running the statement."""

    kind = "execution"
