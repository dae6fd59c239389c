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


_RESOURCE_MESSAGES = ("out of memory", "too big", "too large", "too many", "too complex", "too deep")
_DAMAGE_MESSAGES = ("malformed", "file is not a database", "disk i/o error")


def sqlite_error(text: str, refused: str | None, sql: str, budget_s: float) -> SqlError:
    """The typed error of a statement SQLite refused or failed, from its message ``text`` and what
    the guard's authorizer ``refused`` (None when it refused nothing), for a ``budget_s`` budget."""
    if text == "interrupted":
        return QueryTimeoutError(f"The query ran longer than its {budget_s:g} s budget and was stopped.", sql=sql)
    if refused or "not authorized" in text or "prohibited" in text:
        what = refused or "an operation other than reading"
        return ForbiddenError(f"The query uses {what}, which the guard does not allow; it was refused.", sql=sql)
    if "readonly" in text:
        return ForbiddenError("The database is open read-only; writes are refused.", sql=sql)
    if "one statement at a time" in text:
        return NotAQueryError("Expected exactly one statement, found several.", sql=sql)
    if any(marker in text.lower() for marker in _DAMAGE_MESSAGES):
        return DatabaseOpenError(f"The database file is damaged: {text}.", sql=sql)
    if any(marker in text.lower() for marker in _RESOURCE_MESSAGES):
        return ResourceError(f"The query needs more than the guard allows: {text}.", sql=sql)
    return ExecutionError(text, sql=sql)


def refusal_reason(name: str, reasons: dict[str, str]) -> str | None:
    """The reason ``reasons`` (a guard's refused functions: a name, or a prefix ending in ``_``)
    gives for the function ``name``: the longest matching entry's, or None.

    >>> refusal_reason("pg_read_file", {"pg_": "a server's", "pg_read_file": "reads files"})
    'reads files'
    """
    best = None
    for key, reason in reasons.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            if best is None or len(key) > len(best[0]):
                best = (key, reason)
    return best[1] if best else None

