"""A guarded DuckDB database: the same guard as the SQLite one, built from DuckDB's parts.

DuckDB has no authorizer: a read-only connection with external access off still lets
``CREATE TEMP TABLE``, ``CHECKPOINT``, ``PRAGMA database_list``, ``duckdb_settings()`` and
``query('...')`` through, and it only checks for an interrupt between vectors, so one call over
one huge value runs on past ``interrupt()`` and past ``memory_limit``. So the guard is layered,
and no layer has to be perfect:

1. a parsed check with sqlglot (``dialect="duckdb"``, :func:`check_duckdb_query`): exactly one
   statement, a query, with no statement inside it that writes or is not a read (a writing CTE,
   ``SELECT INTO``); calling only the functions of :data:`ALLOWED_FUNCTIONS` (every other is
   refused and named, the dangerous ones of :data:`REFUSED_FUNCTIONS` with the reason; sqlglot's
   typed nodes map to DuckDB's names through a reviewed table, and a node not in it is refused;
   a bare name DuckDB's binder reads as a call, such as ``user`` or ``"current_schema"``, counts
   as that call unless a table of its SELECT has a column of that name); casting only to plain
   data types; reading only the database's own tables and views of its main schema (never a
   file or URL named as a table, a table function other than the value generators of
   :data:`TABLE_FUNCTIONS`, another schema or catalogue, ``information_schema``, ``pg_catalog``
   or the ``duckdb_*``/``sqlite_*`` views);
2. the connection (:mod:`sqlchorus.tools.engines.duckdb_guard`): read-only, external access off (no
   files, no network, no extensions), no temporary directory, bounded memory and threads, and
   its configuration locked so that no statement can change any of it;
3. a time budget per statement: a timer interrupts it at the budget, and since one call can run
   on past an interrupt, each statement runs in a worker process that is killed at the budget
   plus :data:`~sqlchorus.tools.engines.base.KILL_GRACE_S` and replaced, as the SQLite guard's are.
   The worker's address space is limited too, so a function that builds a value of gigabytes
   fails with a typed error instead of exhausting the machine. DuckDB would allow threads too
   (cursors of one connection run side by side in threads, as several read-only processes
   share one file); processes are chosen for the kill and the memory limit alone, at the cost
   of about a tenth of a second to start a worker;
4. results are fetched in batches, capped in rows and bytes, and converted to the plain values
   the SQLite path gives (:func:`~sqlchorus.tools.engines.duckdb_guard.plain`: DECIMAL as int when
   integral else float; dates, times, intervals and UUIDs as text; LIST as list, STRUCT and MAP
   as dict).

A DuckDB file held open for writing by another process cannot be read (DuckDB locks it): opening
it fails with one :class:`DatabaseOpenError` line saying so. Conversely, while a database is open
here, no other process can open the file for writing.

DuckDB (``pip install 'sqlchorus[duckdb]'``) is imported when a database is opened, so that this
module imports without it.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from sqlglot import exp
from typing_extensions import Unpack

from sqlchorus.tools.engines import base
from sqlchorus.tools.engines.duckdb_guard import (
    MEMORY_LIMIT_BYTES,
    THREADS,
    open_guarded,
    run,
    worker_command,
)
from sqlchorus.tools.engines.catalog import Column, ForeignKey, Table
from sqlchorus.tools.engines.names import require_file
from sqlchorus.tools.sql.errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    ResourceError,
    SqlError,
    refusal_reason,
)

__all__ = [
    "ALLOWED_FUNCTIONS", "ALLOWED_TYPES", "INSTALL_HINT", "REFUSED_FUNCTIONS", "TABLE_FUNCTIONS", "DuckDatabase",
    "check_duckdb_query", "duckdb_error",
]

INSTALL_HINT = "pip install 'sqlchorus[duckdb]'"

URL_PREFIX = "duckdb://"

# -- what a query may do -------------------------------------------------------------------------

ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    # conditionals and comparisons
    "coalesce ifnull nullif greatest least if case exists".split()
    # strings
    + "lower upper lcase ucase length len char_length character_length strlen octet_length bit_length "
    "concat concat_ws substring substr position strpos instr left right trim ltrim rtrim replace "
    "translate reverse split_part starts_with ends_with prefix suffix contains format printf md5 "
    "sha256 ascii chr unicode ord regexp_replace regexp_matches regexp_extract regexp_extract_all "
    "regexp_full_match regexp_split_to_array string_split str_split string_to_array split "
    "array_to_string levenshtein damerau_levenshtein jaccard jaro_similarity "
    "jaro_winkler_similarity hamming mismatches editdist3 nfc_normalize strip_accents to_base64 "
    "from_base64 hex unhex from_hex to_hex bin".split()
    # numbers
    + "abs ceil ceiling floor round trunc sign mod power pow sqrt cbrt exp ln log log2 log10 pi "
    "degrees radians sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh cot random "
    "gcd lcm factorial even isnan isinf isfinite round_even roundbankers bit_count xor fdiv fmod".split()
    # dates and times
    + "current_date current_time current_timestamp now today get_current_time get_current_timestamp "
    "date_trunc datetrunc date_part datepart extract date_diff datediff date_sub datesub date_add age "
    "make_date make_time make_timestamp year month day dayofmonth dayofweek dayofyear week weekofyear "
    "weekday quarter hour minute second millisecond microsecond epoch epoch_ms epoch_us epoch_ns "
    "yearweek isodow isoyear era century decade dayname monthname last_day strftime strptime "
    "try_strptime to_timestamp time_bucket to_days to_months to_years to_hours to_minutes "
    "to_seconds to_weeks".split()
    # aggregates
    + "count count_star count_if countif sum avg mean min max string_agg group_concat listagg array_agg list "
    "bool_and bool_or stddev stddev_pop stddev_samp variance var_pop var_samp corr covar_pop "
    "covar_samp regr_slope regr_intercept regr_r2 regr_count regr_avgx regr_avgy median mode "
    "quantile quantile_cont quantile_disc percentile_cont percentile_disc any_value first last "
    "arg_max arg_min argmax argmin max_by min_by product sumkahan fsum favg approx_count_distinct "
    "approx_quantile histogram entropy kurtosis skewness bit_and bit_or bit_xor".split()
    # window functions
    + "row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value "
    "nth_value".split()
    # lists, structs and maps (values in, values out)
    + "unnest range generate_series list_value list_pack array_value array_length list_contains "
    "list_has array_contains list_position list_indexof array_position list_extract list_element "
    "array_extract list_slice array_slice list_concat list_cat array_concat array_cat list_append "
    "array_append list_prepend array_prepend list_sort array_sort list_reverse_sort array_reverse_sort "
    "list_distinct array_distinct list_unique array_unique list_sum list_min list_max list_avg list_count "
    "list_filter array_filter filter list_transform array_transform apply list_apply list_reduce "
    "array_reduce reduce flatten list_has_any list_has_all cardinality list_zip struct_pack "
    "struct_extract row map map_extract map_keys map_values element_at".split()
    # JSON (values in, values out)
    + "json_extract json_extract_string json_extract_path json_extract_path_text json_array_length "
    "json_type json_valid json_keys json_object json_array json_quote to_json json_structure "
    "json_contains json_exists json_value -> ->>".split()
    # constructs sqlglot writes as functions
    + "typeof cast try_cast columns".split()
)
"""Functions a query may call, by their DuckDB names: the scalar, aggregate, window, string,
date, math, list and JSON functions a question needs. Everything else is refused and named;
:data:`REFUSED_FUNCTIONS` gives the reason for the dangerous ones."""

REFUSED_FUNCTIONS: dict[str, str] = {
    "read_": "reads files (read_csv, read_parquet, read_json, read_text, read_blob...)",
    "parquet_": "reads files",
    "sniff_csv": "reads files",
    "glob": "lists files",
    "iceberg_": "reads files",
    "delta_scan": "reads files",
    "sqlite_": "reads other database files",
    "postgres_": "connects to other servers",
    "mysql_": "connects to other servers",
    "getenv": "reveals the environment",
    "current_setting": "reveals the settings (paths among them)",
    "getvariable": "reads session state, not the data",
    "duckdb_": "reveals the catalogue, settings, files and secrets, not the data",
    "pragma_": "reveals the catalogue, settings and files, not the data",
    "which_secret": "reveals secrets",
    "query": "runs a statement given as text, past the guard's check",
    "query_table": "reads tables named as text, past the guard's check",
    "sql_auto_complete": "reveals the catalogue, not the data",
    "nextval": "writes a sequence",
    "currval": "reads the session's sequence state, not the data",
    "setseed": "changes the session's state",
    "checkpoint": "writes the database",
    "force_checkpoint": "writes the database",
    "version": "reveals the build, not the data",
    "current_database": "reveals the connection, not the data",
    "current_catalog": "reveals the connection, not the data",
    "current_schema": "reveals the connection, not the data",
    "current_schemas": "reveals the connection, not the data",
    "current_query": "reveals the connection, not the data",
    "current_user": "reveals the connection, not the data",
    "current_role": "reveals the connection, not the data",
    "session_user": "reveals the connection, not the data",
    "user": "reveals the connection, not the data",
    "repeat": "builds large strings no question asks for",
    "lpad": "builds large strings no question asks for",
    "rpad": "builds large strings no question asks for",
    "uuid": "makes values no question asks for",
    "gen_random_uuid": "makes values no question asks for",
    "test_": "DuckDB's own test functions",
    "summary": "DuckDB's own diagnostics",
    "load_aws_credentials": "reads credentials",
}
"""Functions (a name, or a prefix ending in ``_``) that are refused, each with the reason. The
longest matching entry gives the reason; every function not in :data:`ALLOWED_FUNCTIONS` is
refused anyway."""

TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
"""Table functions a query may read from: generators of values (like a recursive CTE), never a
reader of files, settings or the catalogue."""

_NODE_NAMES: dict[str, str] = {
    # sqlglot parses many functions into typed nodes; each maps to a DuckDB name it was written
    # as. A typed node missing here is refused (a new sqlglot's nodes are reviewed first).
    "Abs": "abs", "Acos": "acos", "Acosh": "acosh", "AnyValue": "any_value",
    "ApproxDistinct": "approx_count_distinct", "ApproxQuantile": "approx_quantile", "ArgMax": "arg_max",
    "ArgMin": "arg_min", "Array": "list_value", "ArrayAgg": "array_agg", "ArrayAppend": "array_append",
    "ArrayConcat": "array_concat", "ArrayDistinct": "array_distinct", "ArrayFilter": "list_filter",
    "ArrayMax": "list_max", "ArrayMin": "list_min", "ArrayPrepend": "array_prepend", "ArraySize": "array_length",
    "ArraySlice": "array_slice", "ArraySort": "list_sort", "ArrayToString": "array_to_string",
    "ArrayContains": "list_contains", "ArrayUniqueAgg": "list", "Ascii": "ascii", "Asin": "asin",
    "Asinh": "asinh", "Atan": "atan", "Atan2": "atan2", "Atanh": "atanh", "Avg": "avg", "BitLength": "bit_length",
    "BitwiseAndAgg": "bit_and", "BitwiseOrAgg": "bit_or", "BitwiseXorAgg": "bit_xor", "Bracket": "list_extract",
    "Case": "case", "Cast": "cast", "Cbrt": "cbrt", "Ceil": "ceil", "Chr": "chr", "Coalesce": "coalesce",
    "Columns": "columns", "Concat": "concat", "ConcatWs": "concat_ws", "Contains": "contains", "Corr": "corr",
    "Cos": "cos", "Cosh": "cosh", "Cot": "cot", "Count": "count", "CountIf": "count_if", "CovarPop": "covar_pop",
    "CovarSamp": "covar_samp", "CumeDist": "cume_dist", "CurrentDate": "current_date",
    "CurrentTime": "current_time", "CurrentTimestamp": "current_timestamp", "Date": "cast", "DateAdd": "date_add",
    "DateBin": "time_bucket", "DateDiff": "date_diff", "DateFromParts": "make_date", "DateStrToDate": "cast",
    "DateSub": "date_sub", "DateTrunc": "date_trunc", "DateToDi": "strftime", "Day": "day",
    "DayOfMonth": "dayofmonth", "DayOfWeek": "dayofweek", "DayOfWeekIso": "isodow", "DayOfYear": "dayofyear",
    "Dayname": "dayname", "Degrees": "degrees", "DenseRank": "dense_rank", "EndsWith": "ends_with",
    "Exists": "exists", "Exp": "exp", "Explode": "unnest", "Extract": "extract", "Factorial": "factorial",
    "First": "first", "FirstValue": "first_value", "Flatten": "flatten", "Floor": "floor", "Format": "format",
    "FromBase64": "from_base64", "GenerateSeries": "range", "Greatest": "greatest", "GroupConcat": "string_agg",
    "Hex": "hex", "Hour": "hour", "If": "if", "IsInf": "isinf", "IsNan": "isnan", "JSONArray": "json_array",
    "JSONExtract": "->", "JSONExtractScalar": "->>", "JSONKeys": "json_keys", "JSONObject": "json_object",
    "JSONType": "json_type", "JarowinklerSimilarity": "jaro_winkler_similarity", "Kurtosis": "kurtosis",
    "Lag": "lag", "Last": "last", "LastDay": "last_day", "LastValue": "last_value", "Lead": "lead",
    "Least": "least", "Left": "left", "Length": "length", "Levenshtein": "levenshtein", "Ln": "ln", "Log": "log",
    "LogicalAnd": "bool_and", "LogicalOr": "bool_or", "Lower": "lower", "MD5": "md5", "Map": "map",
    "MapKeys": "map_keys", "Max": "max", "Median": "median", "Min": "min", "Minute": "minute", "Mode": "mode",
    "Month": "month", "Monthname": "monthname", "NthValue": "nth_value", "Ntile": "ntile", "Nullif": "nullif",
    "Pad": "lpad", "PercentRank": "percent_rank", "PercentileCont": "percentile_cont",
    "PercentileDisc": "percentile_disc", "Pow": "power", "Quantile": "quantile", "Quarter": "quarter",
    "Radians": "radians", "Rand": "random", "Rank": "rank", "Reduce": "reduce", "RegexpExtract": "regexp_extract",
    "RegexpExtractAll": "regexp_extract_all", "RegexpILike": "regexp_matches", "RegexpLike": "regexp_matches",
    "RegexpReplace": "regexp_replace", "RegexpSplit": "regexp_split_to_array", "RegrAvgx": "regr_avgx",
    "RegrAvgy": "regr_avgy", "RegrCount": "regr_count", "RegrIntercept": "regr_intercept", "RegrR2": "regr_r2",
    "RegrSlope": "regr_slope", "Repeat": "repeat", "Replace": "replace", "Reverse": "reverse", "Right": "right",
    "Round": "round", "RowNumber": "row_number", "SHA2": "sha256", "Second": "second", "Sign": "sign",
    "Sin": "sin", "Sinh": "sinh", "Skewness": "skewness", "Split": "string_split", "SplitPart": "split_part",
    "Sqrt": "sqrt", "StartsWith": "starts_with", "Stddev": "stddev", "StddevPop": "stddev_pop",
    "StddevSamp": "stddev_samp", "StrPosition": "strpos", "StrToDate": "strptime", "StrToTime": "strptime",
    "Struct": "struct_pack", "StructExtract": "struct_extract", "Substring": "substring", "Sum": "sum",
    "Tan": "tan", "Tanh": "tanh", "TimeFromParts": "make_time", "TimeStrToTime": "cast",
    "TimeToStr": "strftime", "TimeToUnix": "epoch", "TimestampFromParts": "make_timestamp",
    "TimestampTrunc": "date_trunc", "ToBase64": "to_base64", "ToDays": "to_days", "Transform": "list_transform",
    "Translate": "translate", "Trim": "trim", "Trunc": "trunc", "TryCast": "try_cast", "Tuple": "row",
    "TsOrDsToDate": "cast", "Typeof": "typeof", "Unhex": "unhex", "Unicode": "unicode", "Unnest": "unnest",
    "UnixToTime": "to_timestamp", "Upper": "upper", "Uuid": "uuid", "Variance": "variance",
    "VariancePop": "var_pop", "VarMap": "map", "Week": "week", "WeekOfYear": "weekofyear", "Year": "year",
    "Interval": "to_days", "Lambda": "list_transform",
}

_CONSTRUCTS = frozenset({"case", "cast", "try_cast", "exists", "extract", "columns", "->", "->>"})

_ALLOWED_TYPE_NAMES = (
    "BIGINT INT SMALLINT TINYINT INT128 UBIGINT UINT UINT128 USMALLINT UTINYINT HUGEINT UHUGEINT "
    "BIGDECIMAL DECIMAL DOUBLE FLOAT BOOLEAN BIT CHAR NCHAR VARCHAR NVARCHAR TEXT "
    "DATE TIME TIMETZ TIMESTAMP TIMESTAMPNTZ TIMESTAMPTZ TIMESTAMPLTZ TIMESTAMP_S TIMESTAMP_MS TIMESTAMP_NS "
    "INTERVAL JSON UUID ARRAY LIST STRUCT MAP VARBINARY BINARY BLOB"
).split()
ALLOWED_TYPES: frozenset[exp.DType] = frozenset(  # exp.DataType.Type is exp.DType
    getattr(exp.DataType.Type, n) for n in _ALLOWED_TYPE_NAMES if hasattr(exp.DataType.Type, n)
)
"""Types a value may be cast to: plain data types (a cast to a type sqlglot does not know, or to
one of DuckDB's internal types, is refused). sqlglot reads DuckDB's ``TIMESTAMP`` as
``TIMESTAMPNTZ`` (a timestamp without a time zone), which is why both are here."""

_WRITING_NODES = base.WRITING_NODES + tuple(
    getattr(exp, n) for n in "Summarize Attach Detach Install Export".split() if hasattr(exp, n))

_VALUE_NAMES = frozenset({
    "current_catalog", "current_date", "current_role", "current_schema", "current_time", "current_timestamp",
    "current_user", "localtime", "localtimestamp", "session_user", "user",
})
"""Names DuckDB's binder reads as a call of the function of that name when no column of that name
is in reach, quoted or not: ``SELECT "user"`` gives 'duckdb' and ``SELECT current_schema`` gives
'main'. sqlglot reads them as columns, so the function check does not see the call."""

_CATALOGUE_SCHEMAS = frozenset({"information_schema", "pg_catalog", "system", "temp"})
_CATALOGUE_PREFIXES = ("duckdb_", "pragma_", "sqlite_", "pg_")


def _function_name(node: exp.Func) -> str:
    """The DuckDB name of a function node; '' for a typed node this guard has not reviewed."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return _NODE_NAMES.get(type(node).__name__, "")


def _refusal_reason(name: str) -> str | None:
    """The reason :data:`REFUSED_FUNCTIONS` gives for ``name`` (the longest matching entry)."""
    return refusal_reason(name, REFUSED_FUNCTIONS)


def _refuse_call(node: exp.Func, name: str, sql: str) -> ForbiddenError:
    if not name:
        names = type(node).sql_names()
        shown = names[0].lower() if names else type(node).__name__
        return ForbiddenError(f"The query calls {shown}, which the guard does not allow; it was refused.", sql=sql)
    reason = _refusal_reason(name)
    why = f" ({reason})" if reason else ""
    return ForbiddenError(f"The query calls {name}{why}, which the guard does not allow; it was refused.", sql=sql)


def _reads_column(node: exp.Column, name: str, columns: dict[str, frozenset[str]] | None,
                  ctes: set[str]) -> bool:
    """Whether a table read by the SELECT that ``node`` is in has a column ``name``: DuckDB then
    binds the name to that column, never to a function. A name reached only from an outer query,
    or through a subquery or CTE, does not count (the check does not follow scopes)."""
    select = node.find_ancestor(exp.Select)
    if not columns or select is None:
        return False
    first = select.args.get("from_") or select.args.get("from")
    sources = ([first.this] if first is not None else []) + [j.this for j in select.args.get("joins") or ()]
    for source in sources:
        if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
            continue
        table = source.name.lower()
        if not source.db and table in ctes:  # a CTE of that name hides the table
            continue
        if name in columns.get(table, ()):
            return True
    return False


def _check_value_name(node: exp.Column, sql: str, columns: dict[str, frozenset[str]] | None,
                      ctes: set[str]) -> None:
    """Refuse a bare name (``user``, ``"current_schema"``) that DuckDB would read as a call of a
    function the guard does not allow (see :data:`_VALUE_NAMES`)."""
    name = node.name.lower()
    if node.table or name not in _VALUE_NAMES or name in ALLOWED_FUNCTIONS:
        return
    if _reads_column(node, name, columns, ctes):
        return
    reason = _refusal_reason(name)
    why = f" ({reason})" if reason else ""
    raise ForbiddenError(
        f"The query names {node.name}, which DuckDB reads as a call of {name}(){why} when no table of "
        f"the same SELECT has a column {node.name}; the guard does not allow that function. To read a "
        f"column of that name, write it with its table (t.{node.name}); it was refused.", sql=sql)


def _check_functions(tree: exp.Expr, sql: str, columns: dict[str, frozenset[str]] | None = None) -> None:
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, exp.Column):
            _check_value_name(node, sql, columns, ctes)
        elif isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary, exp.Connector)):
            # Operators (AND, ||, LIKE, COLLATE) are nodes of sqlglot's Func too; on values they
            # only compute, so only calls are checked.
            name = _function_name(node)
            if not name or _refusal_reason(name) or name not in ALLOWED_FUNCTIONS:
                raise _refuse_call(node, name, sql)
        elif isinstance(node, exp.DataType):
            if node.this not in ALLOWED_TYPES:
                raise ForbiddenError(
                    f"The query casts to {node.sql(dialect='duckdb')}, which the guard does not allow; "
                    "it was refused.", sql=sql)


def _check_tables(tree: exp.Expr, sql: str, tables: frozenset[str] | None, database: str | None) -> None:
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    known = {t.lower() for t in tables} if tables is not None else None
    for table in tree.find_all(exp.Table):
        this = table.this
        if isinstance(this, exp.Func):
            name = _function_name(this)
            if name not in TABLE_FUNCTIONS or _refusal_reason(name):
                reason = _refusal_reason(name)
                why = f" ({reason})" if reason else ""
                raise ForbiddenError(
                    f"The query reads from the table function {name or type(this).__name__.lower()}{why}, which "
                    "the guard does not allow; only the database's tables may be read; it was refused.", sql=sql)
            continue
        if not isinstance(this, exp.Identifier) or not table.name:
            raise ForbiddenError(f"The query reads from {table.sql(dialect='duckdb')}, which is not a table of the "
                                 "database; it was refused.", sql=sql)
        name, schema, catalog = table.name, table.db, table.catalog
        full = ".".join(p for p in (catalog, schema, name) if p)
        if catalog and (database is None or catalog.lower() != database.lower()):
            raise ForbiddenError(f"The query reads {full}, a table of another database, which the guard does not "
                                 "allow; it was refused.", sql=sql)
        if schema and schema.lower() != "main":
            what = "the catalogue" if schema.lower() in _CATALOGUE_SCHEMAS else f"schema {schema}"
            raise ForbiddenError(f"The query reads {full}, a table of {what}, not of the database's main schema, "
                                 "which the guard does not allow; it was refused.", sql=sql)
        low = name.lower()
        if not schema and not catalog and low in ctes:
            continue
        if known is not None and low in known:
            continue
        if any(ch in name for ch in "./\\:*?"):
            raise ForbiddenError(f"The query reads {name!r}, a file or URL named as a table, which the guard does "
                                 "not allow; only the database's tables may be read; it was refused.", sql=sql)
        if low.startswith(_CATALOGUE_PREFIXES) or low in _CATALOGUE_SCHEMAS:
            raise ForbiddenError(f"The query reads {name}, a view of DuckDB's catalogue, which the guard does not "
                                 "allow; only the database's tables may be read; it was refused.", sql=sql)
        if known is not None:
            raise ForbiddenError(f"The query reads {name}, which is not a table or view of the database; only the "
                                 "database's tables may be read; it was refused.", sql=sql)


def check_duckdb_query(
    sql: str, *, tables: frozenset[str] | None = None, database: str | None = None, functions: bool = True,
    columns: dict[str, frozenset[str]] | None = None,
) -> exp.Expr:
    """The parsed statement if it is one DuckDB query the guard lets run.

    Besides :func:`check_single_query`'s check (one statement, a query): no statement that writes
    or is not a read anywhere in it; tables only of ``tables`` (the database's main schema; when
    None, any plain name that is not a file or catalogue view), qualified at most by ``main`` and
    the catalogue ``database``; table functions only of :data:`TABLE_FUNCTIONS`; and, when
    ``functions``, only functions of :data:`ALLOWED_FUNCTIONS` and casts to :data:`ALLOWED_TYPES`,
    and no bare name DuckDB would read as a call of a function not allowed (``user``,
    ``"current_schema"``): such a name passes only where a table its SELECT reads has a column of
    that name, by ``columns`` (lower-cased table name to its lower-cased column names).

    Raises:
        NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
    """
    tree = base.check_single_query(sql, dialect="duckdb")
    for node in tree.walk():
        base.refuse_writing(node, sql, nodes=_WRITING_NODES)
    _check_tables(tree, sql, tables, database)
    if functions:
        _check_functions(tree, sql, columns)
    return tree


# -- errors --------------------------------------------------------------------------------------

_TIMEOUT_KINDS = {"InterruptException"}
_FORBIDDEN_KINDS = {"PermissionException"}
_RESOURCE_KINDS = {"OutOfMemoryException", "OutOfRangeException"}


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _classify(kind: str, text: str, sql: str, budget: float) -> SqlError:
    """The typed error of a statement DuckDB refused or failed: its error class name ``kind`` and
    message ``text``, for a ``budget``-second budget."""
    first = _first_line(text) or kind
    low = first.lower()
    if kind in _TIMEOUT_KINDS or "interrupted" in low:
        return base.budget_spent(budget, sql)
    if kind in _FORBIDDEN_KINDS or "read-only mode" in low or "configuration has been locked" in low or (
            "disabled by configuration" in low):
        return ForbiddenError(f"DuckDB refused the query ({first}); only reading the database may run.", sql=sql)
    if kind == "OutOfMemoryException" or "out of memory" in low:
        return ResourceError(f"The query needs more memory than the guard allows: {first}", sql=sql)
    if kind in _RESOURCE_KINDS and ("too large" in low or "too big" in low):
        return ResourceError(f"The query needs more than the guard allows: {first}", sql=sql)
    if kind == "ParserException" and "multiple statements" in low:
        return base.several_statements(sql)
    return ExecutionError((text or kind).strip(), sql=sql)


def duckdb_error(exc: BaseException, sql: str, budget: float) -> SqlError:
    """The typed error of a statement DuckDB refused or failed (``exc``, a ``duckdb.Error`` or a
    ``MemoryError``), for a ``budget``-second budget."""
    if isinstance(exc, MemoryError):
        return ResourceError("The query needs more memory than the guard allows: out of memory.", sql=sql)
    return _classify(type(exc).__name__, str(exc), sql, budget)


# -- opening -------------------------------------------------------------------------------------


def _duckdb() -> Any:
    return base.driver("duckdb", f"DuckDB is not installed; install it with: {INSTALL_HINT}")


def _packages_folder() -> str:
    """The folder this process imported DuckDB from ('' when it is not imported)."""
    module = sys.modules.get("duckdb")
    origin = getattr(module, "__file__", None) if module is not None else None
    return os.path.dirname(os.path.dirname(origin)) if origin else ""


def _resolve(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    if isinstance(text, str) and text.lower().startswith(URL_PREFIX):
        text = text[len(URL_PREFIX):]
    return Path(text).expanduser().resolve()


def _check_file(path: Path) -> None:
    """Refuse, with one line, what is not a DuckDB file before DuckDB sees it (DuckDB would try to
    load an extension for a SQLite file, and create a missing one)."""
    require_file(path)
    with open(path, "rb") as f:
        header = f.read(16)
    if not header:
        raise DatabaseOpenError(f"{path} is empty, not a DuckDB database.")
    if header.startswith(b"SQLite format 3\x00"):
        raise DatabaseOpenError(f"{path} is a SQLite database, not a DuckDB one; open it as SQLite.")
    if header[8:12] != b"DUCK":
        raise DatabaseOpenError(f"{path} is not a DuckDB database (its header does not match).")


def _open_error(exc: BaseException, path: Path) -> DatabaseOpenError:
    text = _first_line(str(exc))
    if "lock" in text.lower():
        return DatabaseOpenError(f"Cannot open {path}: another process holds it open for writing, and DuckDB lets "
                                 "no one read a file while it is written; close that process first.")
    if "version" in text.lower() or "serialization" in text.lower():
        return DatabaseOpenError(f"Cannot open {path}: it was written by another DuckDB version ({text}).")
    return DatabaseOpenError(f"Cannot open {path} as a DuckDB database: {text}")


class DuckDatabase(base.WorkerDatabase):
    """A guarded, read-only, time- and size-bounded DuckDB database (see the module's text).

    Args:
        path: an existing DuckDB file, or a ``duckdb:///absolute/path`` URL.
        timeout_s, max_rows, max_bytes, tracer, workers, client_workers, prestart: as for
            :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase`: statements run in ``workers``
            worker processes, each its own read-only connection.
        memory_limit: DuckDB's memory per connection, in bytes.
        threads: DuckDB's threads per connection (1 or 2; a statement's work stays bounded by
            its worker).

    Statements run in the worker processes; the catalogue reads of :meth:`read_structure` and
    sqlchorus's own :meth:`lookup` use a guarded connection of this process, which never waits
    for a statement.

    Raises:
        DatabaseOpenError: DuckDB is not installed, the file is missing, is not a DuckDB file, is
            held open for writing by another process, or has no table or view.
        ValueError: ``workers`` or ``client_workers`` out of range.
    """

    engine = "duckdb"
    dialect = "duckdb"

    def __init__(self, path: str | os.PathLike[str], *, memory_limit: int = MEMORY_LIMIT_BYTES,
                 threads: int = THREADS, **options: Unpack[base.GuardOptions]):
        pooling = self._configure(**options)
        duckdb = _duckdb()
        self.path = _resolve(path)
        self.name = self.path.stem
        self.memory_limit = int(memory_limit)
        self.threads = max(1, min(int(threads), 2))
        self._lock = threading.RLock()
        _check_file(self.path)
        try:
            self._conn = open_guarded(str(self.path), self.memory_limit, self.threads)
        except duckdb.Error as e:
            raise _open_error(e, self.path) from None
        try:
            self._catalog = self._conn.execute("SELECT current_database()").fetchone()[0]
            self._tables = frozenset(name for name, _, _ in self._relations())
            self._columns = self._column_names()
        except BaseException:
            self._conn.close()
            raise
        if not self._tables:
            self._conn.close()
            raise DatabaseOpenError(f"{self.path} has no tables or views in its main schema; there is nothing to "
                                    "ask about.")
        file, command = self.path, worker_command(str(self.path), self.memory_limit, self.threads, _packages_folder())
        self._hold(pooling, lambda: base.Worker(file, command), [self._conn], base.close_quietly)

    # -- the catalogue -----------------------------------------------------------------------

    def _catalogue(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """sqlchorus's own fixed reads of DuckDB's catalogue, under the budget."""
        duckdb = _duckdb()
        with self._lock:
            try:
                _, rows, _, _ = run(self._conn, sql, params, self.timeout_s, 1_000_000, 1 << 30)
            except (duckdb.Error, MemoryError) as e:
                raise duckdb_error(e, sql, self.timeout_s) from None
        return rows

    def _relations(self) -> list[tuple[str, str | None, bool]]:
        return self._catalogue(
            "SELECT table_name, comment, false FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal AND NOT temporary "
            "UNION ALL SELECT view_name, comment, true FROM duckdb_views() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal AND NOT temporary ORDER BY 1")

    def _column_names(self) -> dict[str, frozenset[str]]:
        """The lower-cased column names of each table and view of the main schema, by lower-cased
        name: what tells the check a bare ``user`` is a column (see :func:`check_duckdb_query`)."""
        names: dict[str, set[str]] = {}
        for table, column in self._catalogue(
                "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND NOT internal"):
            names.setdefault(table.lower(), set()).add(column.lower())
        return {table: frozenset(cols) for table, cols in names.items()}

    def read_structure(self) -> list[Table]:
        """The tables and views of the main schema, from DuckDB's catalogue: columns with their
        types, NOT NULL and primary keys, foreign keys (one :class:`ForeignKey` per column pair of
        a compound key), and ``COMMENT ON`` comments as descriptions."""
        by_name: dict[str, Table] = {}
        for name, comment, is_view in self._relations():
            by_name[name] = Table(name=name, columns=[], description=comment or None, is_view=bool(is_view))
        keys = self._catalogue(
            "SELECT table_name, constraint_type, constraint_column_names, referenced_table, referenced_column_names "
            "FROM duckdb_constraints() WHERE database_name = current_database() AND schema_name = 'main' "
            "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') ORDER BY table_name, constraint_index")
        primary = {(t, c) for t, kind, cols, _, _ in keys if kind == "PRIMARY KEY" for c in cols}
        for table, column, type_, nullable, comment in self._catalogue(
                "SELECT table_name, column_name, data_type, is_nullable, comment FROM duckdb_columns() "
                "WHERE database_name = current_database() AND schema_name = 'main' AND NOT internal "
                "ORDER BY table_name, column_index"):
            if table in by_name:
                by_name[table].columns.append(Column(
                    name=column, type=type_, primary_key=(table, column) in primary,
                    not_null=not nullable or (table, column) in primary, description=comment or None))
        for table, kind, cols, ref_table, ref_cols in keys:
            if kind == "FOREIGN KEY" and table in by_name:
                for column, ref_column in zip(cols, ref_cols or cols):
                    by_name[table].foreign_keys.append(
                        ForeignKey(column=column, ref_table=ref_table, ref_column=ref_column))
        self._tables = frozenset(by_name) | self._tables
        return list(by_name.values())

    # -- checking and executing --------------------------------------------------------------

    def check(self, sql: str) -> exp.Expr:
        """The parsed statement, if it is one query the guard lets run (:func:`check_duckdb_query`).

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        return check_duckdb_query(sql, tables=self._tables, database=self._catalog, columns=self._columns)

    def _worker_error(self, message: str, detail: str | None, sql: str, tree: exp.Expr, budget: float) -> SqlError:
        """The typed error of DuckDB's ``message``, ``detail`` being its error's class name."""
        return _classify(detail or "", message, sql, budget)

    def _lookup(self, sql: str, parameters: base.Parameters, limits: base.Limits) -> base.QueryResult:
        """sqlchorus's own read, on this process's connection under the same connection settings,
        time budget and caps; its functions are not checked against the list (the rest of the
        check still holds)."""
        check_duckdb_query(sql, tables=self._tables, database=self._catalog, functions=False)
        params = dict(parameters) if isinstance(parameters, dict) else tuple(parameters or ())
        duckdb = _duckdb()
        with self._lock:
            try:
                columns, rows, truncated, elapsed = run(self._conn, sql, params, *limits)
            except (duckdb.Error, MemoryError) as e:
                raise duckdb_error(e, sql, limits.budget) from None
        return base.QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> base.QueryResult:
        """DuckDB's ``EXPLAIN`` of one read query: the physical plan, never a run (no ANALYZE).

        ``EXPLAIN`` is not a query to the parse check, so the check runs on ``sql`` itself and only
        then is the prefix added; the plan is made in a worker under the same budget, since
        planning folds constant expressions (and so runs their functions).

        Returns:
            Rows ``(id, detail)``: the plan's line number and the line.
        """
        tree = self.check(sql)
        text = "EXPLAIN " + sql.strip()
        result = self._traced(text, tree, self._limits(timeout_s, None, None), ())
        lines = [line for row in result.rows for line in str(row[-1] or "").splitlines() if line.strip()]
        return base.plan_result(text, lines, result.elapsed_ms)

