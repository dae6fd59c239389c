"""A guarded PostgreSQL database: the same guard as the SQLite one, built from PostgreSQL's parts.

A read-only transaction alone does not hold on PostgreSQL: ``SET TRANSACTION READ WRITE`` as a
transaction's first statement, ``SET default_transaction_read_only = off``, several statements
in one text sent by the simple protocol, ``pg_read_file`` or ``lo_import`` as a superuser and
``CREATE TEMP TABLE`` all get through one. So the guard is layered, and no layer has to be
perfect:

1. a parsed check with sqlglot (``dialect="postgres"``): exactly one statement, a query, calling
   only the functions of :data:`ALLOWED_FUNCTIONS` (every other function is refused, named, and
   the dangerous ones of :data:`REFUSED_FUNCTIONS` with the reason), casting only to plain data
   types, reading only tables of the pinned schema, no ``FOR UPDATE``/``FOR SHARE``, no
   ``SELECT INTO``, no writing CTE;
2. the statement runs through the extended protocol (a server-side cursor), which the server
   itself refuses to run several statements through;
3. every statement runs in its own ``BEGIN READ ONLY`` transaction on a session opened with
   ``default_transaction_read_only=on``, ``search_path`` pinned, ``work_mem`` bounded (and
   ``temp_file_limit`` where the role may set it), so the server refuses writes too;
4. the role: :meth:`PostgresDatabase.role_write_reasons` says what the connected role could write
   (a superuser, a role with write grants, CREATE or TEMP); ``require_readonly_role`` refuses to
   open with such a role, otherwise the reasons are kept on ``write_warnings``;
5. a time budget per statement: ``SET LOCAL statement_timeout`` before it (and before each fetch,
   for what is left), and a cancel request from outside at the budget plus
   :data:`~sqlchorus.tools.database.KILL_GRACE_S`, after which the connection is replaced;
6. results are fetched in batches from the server-side cursor and capped in rows and bytes.

The role that should be used is a read-only one, made once by an administrator (``reader``,
database ``db`` and schema ``public`` stand for yours)::

    CREATE ROLE reader LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE;
    REVOKE ALL ON DATABASE db FROM PUBLIC;        -- CREATE and TEMP come from PUBLIC by default
    GRANT CONNECT ON DATABASE db TO reader;
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
    GRANT USAGE ON SCHEMA public TO reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
    ALTER ROLE reader SET temp_file_limit = '256MB';  -- only a superuser may set it for the role

psycopg (``pip install 'sqlchorus[postgres]'``) is imported when a database is opened, so that
this module imports without it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Hashable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from sqlglot import exp

from sqlchorus.tools.database import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WORKERS,
    KILL_GRACE_S,
    Database,
    QueryResult,
    _Closed,
    _Pool,
    check_single_query,
)
from sqlchorus.tools.duckdb_guard import plain
from sqlchorus.tools.schema import Column, ForeignKey, Table
from sqlchorus.tools.sql_errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    QueryTimeoutError,
    ResourceError,
    SqlError,
)
from sqlchorus.tools.sqlite_guard import capped_rows

__all__ = [
    "ALLOWED_FUNCTIONS", "ALLOWED_TYPES", "INSTALL_HINT", "PostgresDatabase", "READONLY_ROLE_SQL",
    "REFUSED_FUNCTIONS", "check_postgres_query", "postgres_error", "redact_url",
]

_log = logging.getLogger(__name__)
_WARNED: set[str] = set()

INSTALL_HINT = "pip install 'sqlchorus[postgres]'"

WORK_MEM = "16MB"
"""Memory per sort or hash of a statement before it spills to temporary files."""
TEMP_FILE_LIMIT = "256MB"
"""Temporary file space per session, set where the role may (a superuser); others should have it
set on their role (:data:`READONLY_ROLE_SQL`)."""
IDLE_IN_TRANSACTION_S = 60
"""A session left inside a transaction (a client that died mid-fetch) is ended by the server."""
CONNECT_TIMEOUT_S = 10
"""How long opening a connection may take (an unreachable host otherwise waits minutes)."""
CANCEL_WAIT_S = 5.0
"""How long a cancel request sent from outside may take to reach the server."""
FETCH_BATCH = 256

READONLY_ROLE_SQL = """\
CREATE ROLE reader LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE;
REVOKE ALL ON DATABASE db FROM PUBLIC;
GRANT CONNECT ON DATABASE db TO reader;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
ALTER ROLE reader SET temp_file_limit = '256MB';"""
"""The statements that make a read-only role (``reader`` on database ``db``, schema ``public``)."""

# -- what a query may do -------------------------------------------------------------------------

ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    # conditionals and comparisons
    "coalesce nullif greatest least exists case if".split()
    # strings
    + "lower upper initcap length char_length character_length octet_length bit_length concat "
    "concat_ws substring substr position strpos left right trim btrim ltrim rtrim replace "
    "translate reverse split_part starts_with format md5 ascii chr regexp_replace regexp_match "
    "regexp_matches regexp_substr regexp_count regexp_like regexp_split_to_array string_to_array "
    "array_to_string to_char to_number to_date to_timestamp encode quote_literal quote_ident "
    "quote_nullable unistr normalize".split()
    # numbers
    + "abs ceil ceiling floor round trunc sign mod div power pow sqrt cbrt exp ln log log10 "
    "pi degrees radians sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh cot "
    "random width_bucket gcd lcm factorial scale trim_scale min_scale".split()
    # dates and times
    + "now current_date current_time current_timestamp localtime localtimestamp "
    "statement_timestamp transaction_timestamp clock_timestamp date_trunc date_part extract age "
    "make_date make_time make_timestamp make_timestamptz make_interval justify_days "
    "justify_hours justify_interval isfinite date_bin timezone date".split()
    # aggregates
    + "count sum avg min max string_agg array_agg bool_and bool_or every stddev stddev_pop "
    "stddev_samp variance var_pop var_samp corr covar_pop covar_samp regr_slope regr_intercept "
    "regr_r2 regr_count regr_avgx regr_avgy percentile_cont percentile_disc mode any_value "
    "json_agg jsonb_agg json_object_agg jsonb_object_agg bit_and bit_or".split()
    # window functions
    + "row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value "
    "nth_value".split()
    # arrays and set-returning helpers over values
    + "unnest generate_series array_length array_position array_positions array_remove "
    "array_replace array_append array_prepend array_cat cardinality array_lower array_upper "
    "array_dims array_ndims".split()
    # JSON (values in, values out)
    + "to_json to_jsonb row_to_json array_to_json json_build_object jsonb_build_object "
    "json_build_array jsonb_build_array json_extract_path jsonb_extract_path "
    "json_extract_path_text jsonb_extract_path_text json_array_length jsonb_array_length "
    "json_array_elements jsonb_array_elements json_array_elements_text jsonb_array_elements_text "
    "json_each jsonb_each json_each_text jsonb_each_text json_object_keys jsonb_object_keys "
    "json_typeof jsonb_typeof jsonb_pretty jsonb_strip_nulls json_strip_nulls jsonb_path_query "
    "jsonb_path_exists jsonb_path_match jsonb_path_query_first jsonb_path_query_array".split()
    # casts and operators sqlglot writes as functions
    + "cast try_cast -> ->> #> #>> like ilike".split()
)
"""Functions a query may call, by their PostgreSQL names: the scalar, aggregate, window, string,
date, math, array and JSON functions a question needs. Everything else is refused and named;
:data:`REFUSED_FUNCTIONS` gives the reason for the dangerous ones."""

REFUSED_FUNCTIONS: dict[str, str] = {
    "pg_read_file": "reads files of the server",
    "pg_read_binary_file": "reads files of the server",
    "pg_ls_dir": "lists folders of the server",
    "pg_stat_file": "reads file details of the server",
    "lo_": "reads or writes large objects and server files",
    "dblink": "connects to other servers",
    "pg_sleep": "only waits",
    "set_config": "changes the session's settings (read-only mode, time limit)",
    "current_setting": "reveals the server's settings",
    "pg_terminate_backend": "ends other sessions",
    "pg_cancel_backend": "stops other sessions' statements",
    "txid_": "reveals or assigns transaction ids",
    "pg_current_xact_id": "assigns a transaction id",
    "nextval": "writes a sequence",
    "setval": "writes a sequence",
    "currval": "reads the session's sequence state, not the data",
    "lastval": "reads the session's sequence state, not the data",
    "pg_advisory": "takes locks",
    "pg_try_advisory": "takes locks",
    "pg_notify": "sends notifications",
    "query_to_xml": "runs a statement given as text, past the guard's check",
    "query_to_xml_and_xmlschema": "runs a statement given as text, past the guard's check",
    "table_to_xml": "reads a table named as text, past the guard's check",
    "cursor_to_xml": "reads a cursor, past the guard's check",
    "database_to_xml": "reads every table, past the guard's check",
    "schema_to_xml": "reads every table of a schema, past the guard's check",
    "pg_logical": "reads or writes replication state",
    "pg_replication": "reads or writes replication state",
    "pg_create": "creates server objects",
    "pg_drop": "drops server objects",
    "pg_reload_conf": "reloads the server's configuration",
    "pg_rotate_logfile": "acts on the server's log",
    "pg_switch_wal": "acts on the server's log",
    "pg_promote": "changes the server's role",
    "pg_backup": "acts on backups",
    "pg_start_backup": "acts on backups",
    "pg_stop_backup": "acts on backups",
    "pg_import_system_collations": "writes the catalogue",
    "pg_file": "writes server files",
    "pg_stat_reset": "resets statistics",
    "pg_get": "reveals catalogue definitions, not the data",
    "pg_": "a server function, not a question's",
    "version": "reveals the build, not the data",
    "current_user": "reveals the connection, not the data",
    "session_user": "reveals the connection, not the data",
    "current_role": "reveals the connection, not the data",
    "user": "reveals the connection, not the data",
    "current_schema": "reveals the connection, not the data",
    "current_schemas": "reveals the connection, not the data",
    "current_database": "reveals the connection, not the data",
    "current_catalog": "reveals the connection, not the data",
    "inet_": "reveals the server's or client's address",
    "has_": "reveals privileges, not the data",
    "to_reg": "reveals the catalogue, not the data",
    "obj_description": "reveals the catalogue, not the data",
    "col_description": "reveals the catalogue, not the data",
    "shobj_description": "reveals the catalogue, not the data",
    "format_type": "reveals the catalogue, not the data",
    "repeat": "builds large strings no question asks for",
    "lpad": "builds large strings no question asks for",
    "rpad": "builds large strings no question asks for",
    "xmlparse": "parses XML (external entities)",
    "xpath": "parses XML (external entities)",
    "gen_random_uuid": "makes values no question asks for",
}
"""Functions (a name, or a prefix ending in ``_``) that are refused, each with the reason. The
longest matching entry gives the reason; every function not in :data:`ALLOWED_FUNCTIONS` is
refused anyway."""

_NODE_NAMES: dict[str, str] = {
    # sqlglot parses many functions into typed nodes; each maps to the PostgreSQL name it was
    # written as. A typed node missing here is refused (a new sqlglot's nodes are reviewed first).
    "Abs": "abs", "AnyValue": "any_value", "ArrayAgg": "array_agg",
    "ArrayAppend": "array_append", "ArrayConcat": "array_cat", "ArrayPrepend": "array_prepend",
    "ArrayRemove": "array_remove", "ArraySize": "array_length", "ArrayToString": "array_to_string",
    "Ascii": "ascii", "Atan2": "atan2", "Avg": "avg", "BitLength": "bit_length",
    "BitwiseAndAgg": "bit_and", "BitwiseOrAgg": "bit_or", "Case": "case", "Cast": "cast",
    "Cbrt": "cbrt", "Ceil": "ceil", "Chr": "chr", "Coalesce": "coalesce", "Concat": "concat",
    "ConcatWs": "concat_ws", "Corr": "corr", "Cos": "cos", "Cot": "cot", "Count": "count",
    "CovarPop": "covar_pop", "CovarSamp": "covar_samp", "CumeDist": "cume_dist",
    "CurrentDate": "current_date", "CurrentTime": "current_time",
    "CurrentTimestamp": "current_timestamp", "CurrentSchema": "current_schema",
    "CurrentUser": "current_user", "SessionUser": "session_user", "CurrentVersion": "version",
    "Date": "date", "DateAdd": "date", "DateSub": "date", "DateTrunc": "date_trunc",
    "DenseRank": "dense_rank", "Degrees": "degrees", "Encode": "encode", "Exists": "exists",
    "Exp": "exp", "Explode": "unnest", "ExplodingGenerateSeries": "generate_series",
    "Extract": "extract", "Factorial": "factorial", "FirstValue": "first_value", "Floor": "floor",
    "Format": "format", "GenerateSeries": "generate_series", "Greatest": "greatest",
    "GroupConcat": "string_agg", "If": "case", "Initcap": "initcap", "JSONArrayAgg": "json_agg",
    "JSONBExtract": "#>", "JSONBExtractScalar": "#>>", "JSONExtract": "->",
    "JSONExtractScalar": "->>", "JSONObject": "json_build_object", "JSONBObjectAgg": "jsonb_object_agg",
    "JSONObjectAgg": "json_object_agg", "Lag": "lag", "LastValue": "last_value", "Lead": "lead",
    "Least": "least", "Left": "left", "Length": "length", "Ln": "ln", "Localtime": "localtime",
    "Localtimestamp": "localtimestamp", "Log": "log", "LogicalAnd": "bool_and",
    "LogicalOr": "bool_or", "Lower": "lower", "MD5": "md5", "Max": "max", "Min": "min",
    "Mode": "mode", "Nullif": "nullif", "NthValue": "nth_value", "Ntile": "ntile",
    "Pad": "lpad", "PercentileCont": "percentile_cont", "PercentileDisc": "percentile_disc",
    "PercentRank": "percent_rank", "Pi": "pi", "Pow": "power", "Quantile": "percentile_cont",
    "Radians": "radians", "Rand": "random", "Rank": "rank", "RegexpExtract": "regexp_substr",
    "RegexpILike": "regexp_like", "RegexpLike": "regexp_like", "RegexpReplace": "regexp_replace",
    "RegexpSplit": "regexp_split_to_array", "Repeat": "repeat", "Replace": "replace",
    "Reverse": "reverse", "Right": "right", "Round": "round", "RowNumber": "row_number",
    "SafeDivide": "div", "Sign": "sign", "Sin": "sin", "SplitPart": "split_part", "Sqrt": "sqrt",
    "StartsWith": "starts_with", "Stddev": "stddev", "StddevPop": "stddev_pop",
    "StddevSamp": "stddev_samp", "StrPosition": "strpos", "StrToDate": "to_date",
    "StrToTime": "to_timestamp", "StringToArray": "string_to_array", "Substring": "substring",
    "Sum": "sum", "Tan": "tan", "TimeToStr": "to_char", "TimestampTrunc": "date_trunc",
    "ToChar": "to_char", "ToNumber": "to_number", "Translate": "translate", "Trim": "trim",
    "Trunc": "trunc", "TryCast": "try_cast", "UnixToTime": "to_timestamp", "Upper": "upper",
    "VariancePop": "var_pop", "Variance": "variance", "WidthBucket": "width_bucket",
    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
    "Tanh": "tanh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Gcd": "gcd",
    "Lcm": "lcm", "Mod": "mod", "Unnest": "unnest", "Array": "array", "Struct": "row",
    "Tuple": "row", "Xor": "xor", "Uuid": "gen_random_uuid", "Normalize": "normalize",
    "Unicode": "ascii", "Levenshtein": "levenshtein", "Lateral": "lateral", "ToDays": "make_interval",
    "MakeInterval": "make_interval", "JSONFormat": "to_json", "ParseJSON": "cast",
    "Collate": "collate", "Interval": "interval", "Bracket": "subscript",
    "DateBin": "date_bin", "JSONStripNulls": "json_strip_nulls", "JustifyDays": "justify_days",
    "JustifyHours": "justify_hours", "JustifyInterval": "justify_interval",
    "TimeFromParts": "make_time", "TimestampFromParts": "make_timestamp",
    "RegexpCount": "regexp_count", "RegexpSubstr": "regexp_substr", "RegrAvgx": "regr_avgx",
    "RegrAvgy": "regr_avgy", "RegrCount": "regr_count", "RegrIntercept": "regr_intercept",
    "RegrR2": "regr_r2", "RegrSlope": "regr_slope",
}

_BARE_IDENTITY = frozenset({"user", "current_role", "current_user", "session_user", "system_user",
                            "current_catalog", "current_schema"})
"""SQL-standard functions PostgreSQL calls without parentheses, which sqlglot may read as a column:
unquoted and unqualified, such a name is the function (a column so named must be quoted)."""

_PLAIN_CONSTRUCTS = frozenset({"array", "row", "xor", "lateral", "collate", "interval", "subscript"})
"""Names of typed nodes that are syntax (ARRAY[...], ROW(...), a subscript), not calls."""

_ALLOWED_TYPE_NAMES = (
    "BIGINT INT SMALLINT TINYINT MEDIUMINT INT128 UBIGINT UINT UINT128 USMALLINT UTINYINT "
    "BIGDECIMAL DECIMAL DECIMAL32 DECIMAL64 DECIMAL128 DOUBLE FLOAT UDECIMAL MONEY SMALLMONEY "
    "BOOLEAN BIT CHAR NCHAR VARCHAR NVARCHAR TEXT NAME BPCHAR CITEXT "
    "DATE DATE32 DATETIME DATETIME2 DATETIME64 TIME TIMETZ TIMESTAMP TIMESTAMPTZ TIMESTAMPLTZ "
    "TIMESTAMP_S TIMESTAMP_MS TIMESTAMP_NS INTERVAL JSON JSONB UUID ARRAY VARBINARY BINARY "
    "INET CIDR SERIAL BIGSERIAL SMALLSERIAL"
).split()
ALLOWED_TYPES: frozenset[exp.DataType.Type] = frozenset(
    getattr(exp.DataType.Type, n) for n in _ALLOWED_TYPE_NAMES if hasattr(exp.DataType.Type, n)
)
"""Types a value may be cast to: plain data types. Casts to ``regclass``, ``regproc``, ``oid``,
``xml``, ``pg_lsn`` and other types of the catalogue or the server are refused."""

_WRITING_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, n) for n in
    "Insert Update Delete Merge Create Drop Alter Command Copy Set Transaction Commit Rollback "
    "TruncateTable Pragma Use Grant Revoke Analyze Declare Lock Into LoadData Refresh Cache "
    "Uncache Kill Describe Show".split()
    if hasattr(exp, n)
)

_OTHER_SCHEMAS = "pg_catalog information_schema pg_toast pg_temp".split()

_URL_SCHEMES = ("postgresql://", "postgres://")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` (a libpq URL or ``key=value`` conninfo) with any password removed."""
    text = url or ""
    if text.lower().startswith(_URL_SCHEMES):
        parts = urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}@{hosts}" if user else hosts
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                           if k.lower() != "password"], safe=",")
        # Written by hand: urlunsplit drops an empty authority (postgresql:///db -> postgresql:/db).
        return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
                + (f"#{parts.fragment}" if parts.fragment else ""))
    return _PASSWORD_KV.sub(r"\1***", text).strip()


def _function_name(node: exp.Func) -> str:
    """The PostgreSQL name of a function node; '' for a typed node this guard has not reviewed
    (its sqlglot name then stands in, so that the refusal names it)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return _NODE_NAMES.get(type(node).__name__, "")


def _refusal_reason(name: str) -> str | None:
    """The reason :data:`REFUSED_FUNCTIONS` gives for ``name`` (the longest matching entry)."""
    best = None
    for key, reason in REFUSED_FUNCTIONS.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            if best is None or len(key) > len(best[0]):
                best = (key, reason)
    return best[1] if best else None


def _check_functions(tree: exp.Expression, sql: str) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary, exp.Connector)):
            # Operators (AND, ||, ~, ->, COLLATE) are nodes of sqlglot's Func too; on values they
            # only compute, so only calls are checked.
            name = _function_name(node)
            if not name:
                shown = type(node).sql_names()[0].lower() if type(node).sql_names() else type(node).__name__
                raise ForbiddenError(f"The query calls {shown}, which the guard does not allow; it was refused.",
                                     sql=sql)
            reason = _refusal_reason(name)
            if reason or (name not in ALLOWED_FUNCTIONS and name not in _PLAIN_CONSTRUCTS):
                why = f" ({reason})" if reason else ""
                raise ForbiddenError(
                    f"The query calls {name}{why}, which the guard does not allow; it was refused.", sql=sql
                )
        elif isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier) \
                and not node.this.quoted and node.name.lower() in _BARE_IDENTITY:
            raise ForbiddenError(
                f"The query calls {node.name.lower()} ({REFUSED_FUNCTIONS['current_user']}), which the guard does "
                "not allow; it was refused.", sql=sql)
        elif isinstance(node, exp.DataType):
            if node.this not in ALLOWED_TYPES:
                raise ForbiddenError(
                    f"The query casts to {node.sql(dialect='postgres')}, which the guard does not allow; "
                    "it was refused.", sql=sql)
        elif isinstance(node, exp.ObjectIdentifier):
            raise ForbiddenError(f"The query uses the catalogue type {node.name}, which the guard does not allow; "
                                 "it was refused.", sql=sql)


def check_postgres_query(
    sql: str, *, schema: str = "public", functions: bool = True, tables: frozenset[str] | None = None,
) -> exp.Expression:
    """The parsed statement if it is one PostgreSQL query the guard lets run.

    Besides :func:`check_single_query`'s check (one statement, a query): no statement that writes
    or is not a read anywhere in it (a writing CTE, ``SELECT INTO``), no ``FOR UPDATE``/``FOR
    SHARE``, no table of another schema than ``schema`` (the catalogue: ``pg_*`` names resolve to
    ``pg_catalog`` whatever the search path, so an unqualified ``pg_*`` name that is not one of
    ``tables`` is refused too), and, when ``functions``, only functions of
    :data:`ALLOWED_FUNCTIONS` and casts to :data:`ALLOWED_TYPES`.

    Raises:
        NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
    """
    try:
        tree = check_single_query(sql, dialect="postgres")
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        # sqlglot's builders of some functions fail this way on arguments they do not expect.
        raise NotAQueryError(f"The SQL does not parse: {type(e).__name__}.", sql=sql) from None
    for node in tree.walk():
        if isinstance(node, exp.Lock):
            raise ForbiddenError("The query locks rows (FOR UPDATE/FOR SHARE), which the guard does not allow; "
                                 "it was refused.", sql=sql)
        if isinstance(node, _WRITING_NODES):
            what = "SELECT INTO" if isinstance(node, exp.Into) else type(node).__name__.upper()
            raise ForbiddenError(f"The query contains {what}, which the guard does not allow: only reading may "
                                 "run; it was refused.", sql=sql)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    known = {t.lower() for t in tables} if tables is not None else None
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Func) or not table.name:
            continue  # a set-returning function in FROM: its call is checked with the functions
        db, catalog = table.db, table.catalog
        name = table.name
        full = ".".join(p for p in (catalog, db, name) if p)
        if db and db.lower() != schema.lower():
            raise ForbiddenError(f"The query reads {full}, a table outside schema {schema}, which the guard "
                                 "does not allow; it was refused.", sql=sql)
        if catalog:
            raise ForbiddenError(f"The query reads {full}, a table of another database, which the guard does "
                                 "not allow; it was refused.", sql=sql)
        if not db and name.lower() not in ctes and name.lower().startswith("pg_") and (
                known is None or name.lower() not in known):
            raise ForbiddenError(f"The query reads {name}, a table of the server's catalogue, which the guard "
                                 "does not allow; it was refused.", sql=sql)
    if functions:
        _check_functions(tree, sql)
    return tree


# -- errors --------------------------------------------------------------------------------------


def _primary(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None) if diag is not None else None
    return (text or str(exc) or type(exc).__name__).strip().splitlines()[0]


def postgres_error(exc: BaseException, sql: str, budget: float) -> SqlError:
    """The typed error of a statement PostgreSQL refused or failed (``exc``, a psycopg error), for
    a ``budget``-second budget."""
    import psycopg.errors as e

    message = _primary(exc)
    if isinstance(exc, e.QueryCanceled):
        return QueryTimeoutError(f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql)
    if isinstance(exc, (e.InsufficientPrivilege, e.ReadOnlySqlTransaction)):
        return ForbiddenError(f"The server refused the query ({message}); only reading may run.", sql=sql)
    if isinstance(exc, (e.InsufficientResources, e.ProgramLimitExceeded, e.OutOfMemory, e.DiskFull,
                        e.ConfigurationLimitExceeded)):
        return ResourceError(f"The query needs more than the guard allows: {message}.", sql=sql)
    if isinstance(exc, (e.AdminShutdown, e.CrashShutdown, e.CannotConnectNow)) or (
            isinstance(exc, e.OperationalError) and not getattr(exc, "sqlstate", None)):
        return ExecutionError(f"The PostgreSQL server went away during the query ({message}); it was not "
                              "completed.", sql=sql)
    if isinstance(exc, e.SyntaxError) and "cannot insert multiple commands" in message:
        return NotAQueryError("Expected exactly one statement, found several.", sql=sql)
    return ExecutionError(message, sql=sql)


def _open_error(exc: BaseException, location: str, password: str | None) -> DatabaseOpenError:
    """One line saying why a connection could not be opened, with no password in it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(line if line.endswith((".", "?", "!", ":")) or i == len(lines) - 1 else line + "."
                    for i, line in enumerate(lines))
    # libpq says "connection to server at "h", port p failed: WHY" for each address it tried;
    # the last attempt's reason (with libpq's hint) is the one line worth showing, without the
    # server's severity word ("FATAL:").
    attempts = list(re.finditer(r"connection to server (?:at|on) .*? failed: ", text))
    reason = text[attempts[-1].end():] if attempts else (text or type(exc).__name__)
    reason = re.sub(r"^(?:FATAL|ERROR):\s+", "", reason)
    if password:
        reason = reason.replace(password, "***")
    return DatabaseOpenError(f"Cannot open the PostgreSQL database {location}: {reason}")


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise DatabaseOpenError(f"PostgreSQL support is not installed: {INSTALL_HINT}") from None
    return psycopg


# -- connections ---------------------------------------------------------------------------------


class _Session:
    """One connection of a database's pool, standing where a SQLite worker process stands: opened
    on first use (or ahead), used by one statement at a time, replaced after a cancel from outside
    or an error that broke it. Only :meth:`interrupt` is called from another thread."""

    def __init__(self, connect):
        self._connect = connect
        self.conn = None
        self.replaced = 0
        self._stopping = False
        self._guard = threading.Lock()

    def connection(self):
        conn = self.conn
        if conn is not None and (conn.closed or conn.broken):
            self.discard(replace=True)
            conn = None
        if conn is None:
            if self._stopping:
                raise _Closed()
            conn = self._connect()
            with self._guard:
                if self._stopping:
                    conn.close()
                    raise _Closed()
                self.conn = conn
        return conn

    def discard(self, replace: bool = False) -> None:
        with self._guard:
            conn, self.conn = self.conn, None
        if conn is not None:
            if replace:
                self.replaced += 1
            try:
                conn.close()
            except Exception:
                pass

    def interrupt(self) -> None:
        """Stop the statement running on it (the database is closing); no connection follows."""
        with self._guard:
            self._stopping = True
            conn = self.conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=CANCEL_WAIT_S)
            except Exception:
                pass

    def close(self) -> None:
        with self._guard:
            self._stopping = True
        self.discard()

    @property
    def pid(self) -> int | None:
        conn = self.conn
        try:
            return conn.info.backend_pid if conn is not None and not conn.closed else None
        except Exception:
            return None


class _SessionPool(_Pool):
    """:class:`~sqlchorus.tools.database._Pool`'s order of arrival, per-client cap and closing,
    over ``size`` connections instead of worker processes: every slot exists from the start, and
    each connects when a statement first needs it."""

    def __init__(self, connect, size: int, client_cap: int):
        super().__init__(None, 0, size, client_cap)
        self._all = [_Session(connect) for _ in range(size)]
        self._idle = list(self._all)

    def prestart(self) -> None:
        with self._lock:
            session = self._idle[-1] if self._idle and not self._closed else None
        if session is not None and session.conn is None:
            try:
                session.connection()
            except (SqlError, _Closed):
                pass  # the first statement reports it

    def status(self) -> dict[str, Any]:
        status = super().status()
        status["started"] = sum(1 for s in self._all if s.conn is not None)
        return status


class _Watch:
    """Cancels the statement of ``conn`` from outside at ``after`` seconds, unless stopped first:
    a cancel that lands after the statement ended must not hit the next one."""

    def __init__(self, conn, after: float):
        self.conn = conn
        self.fired = False
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(after, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            try:
                self.conn.cancel_safe(timeout=CANCEL_WAIT_S)
            except Exception:
                pass

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True


_cursor_names = itertools.count(1)


def _set_timeout(conn, seconds: float) -> None:
    conn.execute(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}")


def _run(conn, sql: str, parameters: Any, budget: float, row_cap: int, byte_cap: int,
         ) -> tuple[list[str], list[tuple[Any, ...]], bool, float, bool]:
    """Run one query on ``conn`` in its own read-only transaction, through a server-side cursor,
    under its deadline and caps: ``(columns, rows, truncated, elapsed_ms, cancelled_from_outside)``.

    Raises:
        psycopg.Error: what the server or the connection raised.
    """
    start = time.monotonic()
    deadline = start + budget
    watch = _Watch(conn, budget + KILL_GRACE_S)
    try:
        with conn.transaction():
            _set_timeout(conn, budget)
            with conn.cursor(name=f"sqlchorus_{next(_cursor_names)}") as cur:
                cur.execute(sql, parameters or None)
                columns = [d.name for d in cur.description or ()]

                def fetch(count: int) -> list[tuple[Any, ...]]:
                    # What is left of the budget bounds each batch the server sends.
                    _set_timeout(conn, max(deadline - time.monotonic(), 0.001))
                    return cur.fetchmany(min(FETCH_BATCH, row_cap + 1 - count))

                rows, truncated = capped_rows(fetch, row_cap, byte_cap, plain)
    finally:
        watch.stop()
    return columns, rows, truncated, (time.monotonic() - start) * 1000.0, watch.fired


class _Opener:
    """Opens guarded sessions for one database: read-only by default, search path pinned, memory
    bounded. Holds no reference to the database, so that a database dropped without close() is
    still collected and its connections closed."""

    def __init__(self, url: str, kwargs: dict[str, Any], location: str, password: str | None,
                 limit_warnings: list[str]):
        self.url = url
        self.kwargs = kwargs
        self.location = location
        self.password = password
        self.limit_warnings = limit_warnings

    def __call__(self):
        psycopg = _psycopg()
        try:
            conn = psycopg.connect(self.url, autocommit=True, **self.kwargs)
        except psycopg.Error as e:
            raise _open_error(e, self.location, self.password) from None
        try:
            conn.read_only = True  # psycopg's transaction() then issues BEGIN READ ONLY
            try:
                conn.execute(f"SET temp_file_limit = '{TEMP_FILE_LIMIT}'")
            except psycopg.errors.InsufficientPrivilege:
                pass  # only a superuser may set it; otherwise it is set on the role, or warned about
            limit = conn.execute("SHOW temp_file_limit").fetchone()[0]
            if limit == "-1" and not self.limit_warnings:
                self.limit_warnings.append(
                    f"temp_file_limit is unlimited for role {conn.info.user}: a superuser should run "
                    f"ALTER ROLE {conn.info.user} SET temp_file_limit = '{TEMP_FILE_LIMIT}'")
        except psycopg.Error as e:
            conn.close()
            raise _open_error(e, self.location, self.password) from None
        return conn


class PostgresDatabase(Database):
    """A guarded, read-only, time- and size-bounded PostgreSQL database (see the module's text).

    Args:
        url: a libpq URL or conninfo (``postgresql://user@host:port/db``); libpq fills in what it
            leaves out from the ``PG*`` environment variables and the password file
            (``~/.pgpass`` or ``PGPASSFILE``).
        timeout_s, max_rows, max_bytes, tracer, workers, client_workers, prestart: as for
            :class:`~sqlchorus.tools.database.GuardedDatabase`; ``workers`` counts connections.
        require_readonly_role: refuse to open when the role could write
            (:meth:`role_write_reasons`); otherwise the reasons are kept on ``write_warnings``.
        schema: the schema read; the search path is pinned to it.

    Attributes:
        write_warnings: what the role could write, for the caller to show (empty for a
            read-only role).
        limit_warnings: limits the role could not set on itself (``temp_file_limit``).

    Raises:
        DatabaseOpenError: psycopg is missing, the server cannot be reached, the login is refused,
            the database does not exist, or the role could write and ``require_readonly_role``.
        ValueError: ``workers`` or ``client_workers`` out of range.
    """

    engine = "postgresql"
    dialect = "postgres"
    path = None

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tracer: Any = None,
        workers: int = DEFAULT_WORKERS,
        client_workers: int | None = None,
        require_readonly_role: bool = False,
        prestart: bool = True,
        schema: str = "public",
    ):
        client_workers = self._configure(timeout_s, max_rows, max_bytes, tracer, workers, client_workers)
        self._location = redact_url(url)
        self.schema = schema
        self.write_warnings: list[str] = []
        self.limit_warnings: list[str] = []
        psycopg = _psycopg()
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise DatabaseOpenError(f"Not a PostgreSQL URL: {self._location} ({_primary(e)})") from None
        self._password = params.get("password") or None
        self.name = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user")
                        or os.environ.get("PGUSER") or "")
        self._url = url
        options = " ".join(f"-c {k}={v}" for k, v in (
            ("default_transaction_read_only", "on"),
            ("statement_timeout", max(1, int(timeout_s * 1000))),
            ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_S * 1000),
            ("work_mem", WORK_MEM),
            ("search_path", _quoted_option(schema)),
            ("lock_timeout", max(1, int(timeout_s * 1000))),
        ))
        self._connect_kwargs = {"options": options, "application_name": "sqlchorus",
                                "connect_timeout": params.get("connect_timeout") or CONNECT_TIMEOUT_S}
        self._lock = threading.RLock()
        self._connect = _Opener(url, self._connect_kwargs, self._location, self._password, self.limit_warnings)
        # This process's connection, for the catalogue and lookups: in a list shared with the
        # database's views, so that one opened again after a drop serves them all.
        self._own_conn = [self._connect()]
        conn = self._own_conn[0]
        self.name = conn.info.dbname or self.name
        self._role = conn.info.user
        try:
            self._tables = self._table_names()
            self.write_warnings = self.role_write_reasons()
        except BaseException:
            conn.close()
            raise
        if self.write_warnings and require_readonly_role:
            role = conn.info.user
            conn.close()
            raise DatabaseOpenError(
                f"The role {role} could write to {self._location} "
                f"({'; '.join(self.write_warnings)}); connect as a read-only role instead, made with: "
                + " ".join(READONLY_ROLE_SQL.splitlines())
            )
        for warning in self.warnings:
            if warning not in _WARNED:  # once per process: an eval opens many databases as one role
                _WARNED.add(warning)
                _log.warning("Warning: %s", warning)
        self._pool = _SessionPool(self._connect, workers, client_workers)
        weakref.finalize(self, _close_all, self._pool, self._own_conn)
        if prestart:
            self._pool.prestart()

    # -- opening -----------------------------------------------------------------------------

    @property
    def location(self) -> str:
        return self._location

    @property
    def warnings(self) -> list[str]:
        """One line saying what the role could write (when it could), then the limits it could
        not set on itself."""
        said = []
        if self.write_warnings:
            said.append(f"the role {self._role} could write to {self._location} ({'; '.join(self.write_warnings)}); "
                        "connect as a read-only role (--require-readonly-role refuses any other)")
        return said + self.limit_warnings

    def _catalogue(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """sqlchorus's own read of the catalogue, on this process's connection, in a read-only
        transaction under the database's time budget (never a statement from a model or a user)."""
        psycopg = _psycopg()
        with self._lock:
            conn = self._own()
            try:
                with conn.transaction():
                    _set_timeout(conn, self.timeout_s)
                    return conn.execute(sql, params or None, binary=True).fetchall()
            except psycopg.Error as e:
                raise postgres_error(e, sql, self.timeout_s) from None

    def _own(self):
        """This process's connection, opened again if the server dropped it."""
        conn = self._own_conn[0]
        if conn.closed or conn.broken:
            try:
                conn.close()
            except Exception:
                pass
            conn = self._own_conn[0] = self._connect()
        return conn

    def _table_names(self) -> frozenset[str]:
        rows = self._catalogue(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')", (self.schema,))
        return frozenset(r[0] for r in rows)

    def role_write_reasons(self) -> list[str]:
        """What the connected role could write or create, each as a phrase; empty for a role that
        can only read. Checked: superuser, CREATEROLE, CREATEDB, membership of the roles that
        reach server files or programs (or write all data), INSERT/UPDATE/DELETE/TRUNCATE on a
        table of the schema, UPDATE on one of its sequences, CREATE on the database or the
        schema, and TEMP on the database."""
        reasons: list[str] = []
        row = self._catalogue(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
        if row:
            name, superuser, createrole, createdb = row[0]
            if superuser:
                reasons.append(f"role {name} is a superuser")
            if createrole:
                reasons.append(f"role {name} may create roles (CREATEROLE)")
            if createdb:
                reasons.append(f"role {name} may create databases (CREATEDB)")
        members = self._catalogue(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s) "
            "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname",
            (["pg_write_server_files", "pg_read_server_files", "pg_execute_server_program",
              "pg_write_all_data"],))
        reasons += [f"it is a member of {r[0]}" for r in members]
        writable = self._catalogue(
            "SELECT p.priv, string_agg(c.relname, ', ' ORDER BY c.relname) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p(priv) "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND (has_table_privilege(c.oid, p.priv) "
            "     OR (p.priv IN ('INSERT', 'UPDATE') AND has_any_column_privilege(c.oid, p.priv))) "
            "GROUP BY p.priv ORDER BY p.priv", (self.schema,))
        reasons += [f"it has {priv} on {_few(tables)}" for priv, tables in writable]
        sequences = self._catalogue(
            "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'UPDATE') ELSE false END",
            (self.schema,))
        if sequences and sequences[0][0]:
            reasons.append(f"it may advance the sequences {_few(sequences[0][0])}")
        db_create, db_temp, schema_create = self._catalogue(
            "SELECT has_database_privilege(current_database(), 'CREATE'), "
            "has_database_privilege(current_database(), 'TEMP'), "
            "coalesce(has_schema_privilege(%s, 'CREATE'), false)", (self.schema,))[0]
        if db_create:
            reasons.append("it may create schemas in the database (CREATE on the database)")
        if schema_create:
            reasons.append(f"it may create tables in schema {self.schema} (CREATE on the schema)")
        if db_temp:
            reasons.append("it may create temporary tables (TEMP on the database)")
        return reasons

    def read_structure(self) -> list[Table]:
        """The tables and views of the schema, from the catalogue: columns with their types, NOT
        NULL and primary keys, foreign keys (one :class:`ForeignKey` per column pair of a compound
        key), and ``COMMENT ON`` comments as descriptions. Only relations the role may read."""
        relations = self._catalogue(
            "SELECT c.oid, c.relname, c.relkind IN ('v', 'm'), obj_description(c.oid, 'pg_class') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND has_table_privilege(c.oid, 'SELECT') AND NOT c.relispartition ORDER BY c.relname",
            (self.schema,))
        oids = [r[0] for r in relations]
        columns = self._catalogue(
            "SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "col_description(a.attrelid, a.attnum), "
            "EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = a.attrelid AND k.contype = 'p' "
            "        AND a.attnum = ANY(k.conkey)) "
            "FROM pg_attribute a WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attrelid, a.attnum", (oids,))
        keys = self._catalogue(
            "SELECT con.conrelid, a.attname, rc.relname, ra.attname "
            "FROM pg_constraint con "
            "CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(col, refcol, ord) "
            "JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.col "
            "JOIN pg_class rc ON rc.oid = con.confrelid "
            "JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refcol "
            "WHERE con.contype = 'f' AND con.conrelid = ANY(%s) ORDER BY con.conrelid, con.conname, k.ord",
            (oids,))
        by_oid: dict[int, Table] = {}
        out = []
        for oid, name, is_view, comment in relations:
            table = Table(name=name, columns=[], description=comment or None, is_view=bool(is_view))
            by_oid[oid] = table
            out.append(table)
        for oid, name, type_, not_null, comment, primary in columns:
            by_oid[oid].columns.append(Column(name=name, type=type_, primary_key=bool(primary),
                                              not_null=bool(not_null), description=comment or None))
        for oid, column, ref_table, ref_column in keys:
            by_oid[oid].foreign_keys.append(ForeignKey(column=column, ref_table=ref_table, ref_column=ref_column))
        self._tables = frozenset(t.name for t in out) | self._tables
        return out

    # -- checking and executing --------------------------------------------------------------

    def check(self, sql: str) -> exp.Expression:
        """The parsed statement, if it is one query the guard lets run (:func:`check_postgres_query`).

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        return check_postgres_query(sql, schema=self.schema, tables=self._tables)

    def _execute(
        self,
        sql: str,
        tree: exp.Expression,
        timeout_s: float | None,
        max_rows: int | None,
        max_bytes: int | None,
        parameters: tuple[Any, ...] | dict[str, Any],
        client: Hashable | None = None,
    ) -> QueryResult:
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        client = self.client if client is None else client
        closed = ExecutionError("The database was closed; the query did not complete.", sql=sql)
        start = time.monotonic()
        session = self._pool.acquire_within(client, budget, sql, what="connection", units="connections")
        try:
            conn = session.connection()
            left = max(budget - (time.monotonic() - start), 0.001)
            return self._run_on(session, conn, sql, parameters, left, budget, row_cap, byte_cap)
        except _Closed:
            raise closed from None
        finally:
            self._pool.release(session)

    def _run_on(self, session, conn, sql, parameters, left, budget, row_cap, byte_cap) -> QueryResult:
        psycopg = _psycopg()
        try:
            columns, rows, truncated, elapsed, fired = _run(conn, sql, parameters, left, row_cap, byte_cap)
        except psycopg.Error as e:
            if self._pool.closed:
                raise ExecutionError("The database was closed; the query did not complete.", sql=sql) from None
            if conn.closed or conn.broken or isinstance(e, psycopg.errors.QueryCanceled):
                session.discard(replace=True)  # cancelled or broken: the next statement gets a fresh one
            raise postgres_error(e, sql, budget) from None
        if fired:
            session.discard(replace=True)
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def lookup(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
        parameters: tuple[Any, ...] | dict[str, Any] = (),
    ) -> QueryResult:
        """Run one read query that sqlchorus wrote itself (a count, sample values) on this
        process's connection, under the same read-only transaction, time budget and caps; its
        functions are not checked against the list (the rest of the check still holds).

        Raises:
            the same errors as :meth:`execute`.
        """
        check_postgres_query(sql, schema=self.schema, functions=False, tables=self._tables)
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        psycopg = _psycopg()
        with self._lock:
            conn = self._own()
            try:
                columns, rows, truncated, elapsed, fired = _run(conn, sql, parameters, budget, row_cap, byte_cap)
            except psycopg.Error as e:
                raise postgres_error(e, sql, budget) from None
            if fired:
                conn.close()  # cancelled from outside: opened again for the next lookup
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> QueryResult:
        """PostgreSQL's ``EXPLAIN (FORMAT TEXT)`` of one read query: the plan, never a run (no
        ANALYZE). The statement is checked first like one to run, then explained in a read-only
        transaction under the time budget, through the extended protocol.

        Returns:
            Rows ``(line, detail)``: the plan's line number and the line.
        """
        self.check(sql)
        budget = self.timeout_s if timeout_s is None else timeout_s
        text = "EXPLAIN (FORMAT TEXT) " + sql.strip()
        psycopg = _psycopg()
        start = time.monotonic()
        with self._lock:
            conn = self._own()
            watch = _Watch(conn, budget + KILL_GRACE_S)
            try:
                with conn.transaction():
                    _set_timeout(conn, budget)
                    lines = [r[0] for r in conn.execute(text, binary=True).fetchall()]
            except psycopg.Error as e:
                raise postgres_error(e, text, budget) from None
            finally:
                watch.stop()
        rows = [(i, line) for i, line in enumerate(lines)]
        return QueryResult(sql=text, columns=["id", "detail"], rows=rows,
                           elapsed_ms=(time.monotonic() - start) * 1000.0)

    def close(self) -> None:
        """End the connections (a statement still running is cancelled and fails)."""
        _close_all(self._pool, self._own_conn)

    def __repr__(self) -> str:
        return f"PostgresDatabase({self._location!r})"


def _close_all(pool: _SessionPool, own: list) -> None:
    pool.close()
    try:
        own[0].close()
    except Exception:
        pass


def _few(names: str, most: int = 5) -> str:
    parts = names.split(", ")
    return ", ".join(parts[:most]) + (f" and {len(parts) - most} more" if len(parts) > most else "")


def _quoted_option(value: str) -> str:
    """A setting's value for libpq's ``options``: spaces and backslashes escaped."""
    return value.replace("\\", "\\\\").replace(" ", "\\ ")
