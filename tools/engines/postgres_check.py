"""What a PostgreSQL statement may call, read as the server reads it.

Two readings, each enough on its own for what it sees:

1. :func:`check_statement` parses the text with libpg_query (``pglast``), PostgreSQL's own
   parser, so every call is seen however it is spelled: ``pg_catalog."pg_read_file"(...)``,
   field-selection notation ``('/etc/hostname').pg_read_file`` (the server's spelling of
   ``pg_read_file('/etc/hostname')``), ``ROWS FROM``, set-returning functions in any clause,
   casts and type input (``regclass 'pg_authid'``), operators written ``OPERATOR(s.op)``. Only
   the node types a read query needs are let through; any other is refused by name. Calls that
   pad or repeat text are refused unless their size is written out and small, so that no single
   call outruns the statement's budget (the server cannot cancel a call half-way).
2. :func:`check_plan` reads the plan PostgreSQL made of the statement (``EXPLAIN (VERBOSE,
   FORMAT JSON)``, taken inside the statement's read-only transaction and under its budget):
   every function there is the one the server resolved, field selections and ``row.function``
   column notation included, every relation is the one it will read, every cast is the one it
   will make. Planning runs no volatile function; immutable ones over constants may be folded
   away, which is why the first reading refuses explicit calls before the server sees them.

Names are resolved against :class:`ServerNames`, read once from the server's catalogue:
which names are functions (a field selection of one is a call unless it names a column),
which operators and types the database's own schema defines.

>>> check_statement("SELECT upper(name) FROM singer")  # allowed: no padding function called
[]
>>> check_statement("SELECT ('/etc/hostname').pg_read_file")
Traceback (most recent call last):
...
sqlchorus.tools.sql.errors.ForbiddenError: pg_read_file is not allowed: it reads files of the server (called in field-selection notation); the query was refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlchorus.tools.sql.errors import DatabaseOpenError, ForbiddenError, NotAQueryError, refusal_reason

__all__ = [
    "ALLOWED_FUNCTIONS", "ALLOWED_TYPES", "MAX_PAD", "PLAN_TYPES", "REFUSED_FUNCTIONS", "ServerNames",
    "check_plan", "check_statement", "plan_calls", "refusal",
]

MAX_PAD = 1000
"""The widest a padding call may make its result: ``lpad``/``rpad`` widths, ``format`` field
widths, ``repeat``'s result, all written out as numbers. One such call is one step the server
cannot interrupt: ``format('%1000000000s', 'x')`` ran 21 s past a 3 s budget."""

ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    # conditionals and comparisons
    "coalesce nullif greatest least".split()
    # strings
    + "lower upper initcap length char_length character_length octet_length bit_length concat "
    "concat_ws substring substr position strpos left right trim btrim ltrim rtrim replace "
    "translate reverse split_part starts_with format md5 ascii chr regexp_replace regexp_match "
    "regexp_matches regexp_substr regexp_count regexp_like regexp_split_to_array "
    "regexp_split_to_table regexp_instr string_to_array string_to_table array_to_string to_char "
    "to_number to_date to_timestamp encode quote_literal quote_ident quote_nullable unistr "
    "normalize is_normalized overlay lpad rpad repeat like_escape similar_to_escape".split()
    # numbers
    + "abs ceil ceiling floor round trunc sign mod div power pow sqrt cbrt exp ln log log10 "
    "pi degrees radians sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh cot "
    "sind cosd tand asind acosd atand atan2d cotd random width_bucket gcd lcm factorial scale "
    "trim_scale min_scale".split()
    # dates and times
    + "now statement_timestamp transaction_timestamp clock_timestamp date_trunc date_part "
    "extract age make_date make_time make_timestamp make_timestamptz make_interval justify_days "
    "justify_hours justify_interval isfinite date_bin timezone overlaps date".split()
    # aggregates
    + "count sum avg min max string_agg array_agg bool_and bool_or every stddev stddev_pop "
    "stddev_samp variance var_pop var_samp corr covar_pop covar_samp regr_slope regr_intercept "
    "regr_r2 regr_count regr_avgx regr_avgy regr_sxx regr_syy regr_sxy percentile_cont "
    "percentile_disc mode any_value json_agg jsonb_agg json_object_agg jsonb_object_agg bit_and "
    "bit_or".split()
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
)
"""Functions a query may call, by their PostgreSQL names (those of ``pg_catalog``): the scalar,
aggregate, window, string, date, math, array and JSON functions a question needs. Every other
function is refused and named; :data:`REFUSED_FUNCTIONS` says why of the dangerous ones."""

PADDING = frozenset({"lpad", "rpad", "repeat", "format"})
"""Allowed functions whose result can be far larger than their arguments: allowed only when the
size is written out and at most :data:`MAX_PAD` (:func:`_check_padding`)."""

REFUSED_FUNCTIONS: dict[str, str] = {
    "pg_read_file": "reads files of the server",
    "pg_read_binary_file": "reads files of the server",
    "pg_ls_": "lists folders of the server",
    "pg_stat_file": "reads file details of the server",
    "pg_relation_filepath": "reveals the server's file paths",
    "pg_relation_filenode": "reveals the server's file paths",
    "pg_tablespace_location": "reveals the server's file paths",
    "pg_current_logfile": "reveals the server's file paths",
    "lo_": "reads or writes large objects and server files",
    "loread": "reads large objects",
    "lowrite": "writes large objects",
    "dblink": "connects to other servers and runs statements there, past this guard",
    "dblink_": "connects to other servers and runs statements there, past this guard",
    "pg_sleep": "only waits",
    "set_config": "changes the session's settings (read-only mode, time limit)",
    "current_setting": "reveals the server's settings",
    "pg_settings_get_flags": "reveals the server's settings",
    "pg_show_all_settings": "reveals the server's settings",
    "pg_show_all_file_settings": "reveals the server's configuration files",
    "pg_hba_file_rules": "reveals the server's configuration files",
    "pg_ident_file_mappings": "reveals the server's configuration files",
    "pg_stat_get_activity": "reveals other sessions and their statements",
    "pg_stat_get_backend_activity": "reveals other sessions' statements",
    "pg_terminate_backend": "ends other sessions",
    "pg_cancel_backend": "stops other sessions' statements",
    "pg_signal_backend": "signals other sessions",
    "txid_": "reveals or assigns transaction ids",
    "pg_current_xact_id": "assigns a transaction id",
    "nextval": "writes a sequence",
    "setval": "writes a sequence",
    "currval": "reads the session's sequence state, not the data",
    "lastval": "reads the session's sequence state, not the data",
    "pg_advisory_": "takes locks that outlive the statement",
    "pg_try_advisory_": "takes locks that outlive the statement",
    "pg_notify": "sends notifications",
    "pg_listening_channels": "reveals the session's notifications",
    "query_to_xml": "runs a statement given as text, past the guard's check",
    "query_to_xmlschema": "runs a statement given as text, past the guard's check",
    "query_to_xml_and_xmlschema": "runs a statement given as text, past the guard's check",
    "table_to_xml": "reads a table named as text, past the guard's check",
    "table_to_xmlschema": "reads a table named as text, past the guard's check",
    "table_to_xml_and_xmlschema": "reads a table named as text, past the guard's check",
    "cursor_to_xml": "reads a cursor, past the guard's check",
    "cursor_to_xmlschema": "reads a cursor, past the guard's check",
    "database_to_xml": "reads every table, past the guard's check",
    "database_to_xmlschema": "reads every table, past the guard's check",
    "database_to_xml_and_xmlschema": "reads every table, past the guard's check",
    "schema_to_xml": "reads every table of a schema, past the guard's check",
    "schema_to_xmlschema": "reads every table of a schema, past the guard's check",
    "schema_to_xml_and_xmlschema": "reads every table of a schema, past the guard's check",
    "pg_logical_": "reads or writes replication state",
    "pg_replication_": "reads or writes replication state",
    "pg_create_": "creates server objects",
    "pg_drop_": "drops server objects",
    "pg_copy_": "creates server objects",
    "pg_reload_conf": "reloads the server's configuration",
    "pg_rotate_logfile": "acts on the server's log",
    "pg_log_backend_memory_contexts": "writes the server's log",
    "pg_switch_wal": "acts on the server's log",
    "pg_promote": "changes the server's role",
    "pg_backup_": "acts on backups",
    "pg_start_backup": "acts on backups",
    "pg_stop_backup": "acts on backups",
    "pg_import_system_collations": "writes the catalogue",
    "pg_file_": "writes server files",
    "pg_stat_reset": "resets statistics",
    "pg_stat_reset_": "resets statistics",
    "pg_stat_clear_": "resets statistics",
    "pg_get_": "reveals catalogue definitions, not the data",
    "pg_": "belongs to the server, not to a question",
    "version": "reveals the build, not the data",
    "current_user": "reveals the connection, not the data",
    "session_user": "reveals the connection, not the data",
    "system_user": "reveals the connection, not the data",
    "current_role": "reveals the connection, not the data",
    "user": "reveals the connection, not the data",
    "current_schema": "reveals the connection, not the data",
    "current_schemas": "reveals the connection, not the data",
    "current_database": "reveals the connection, not the data",
    "current_catalog": "reveals the connection, not the data",
    "current_query": "reveals the session's statement",
    "inet_": "reveals the server's or client's address",
    "has_": "reveals privileges, not the data",
    "to_reg": "reveals the catalogue, not the data",
    "obj_description": "reveals the catalogue, not the data",
    "col_description": "reveals the catalogue, not the data",
    "shobj_description": "reveals the catalogue, not the data",
    "format_type": "reveals the catalogue, not the data",
    "xmlparse": "parses XML (external entities)",
    "xpath": "parses XML (external entities)",
    "xml": "parses XML (external entities)",
    "gen_random_uuid": "makes values no question asks for",
    "array_fill": "builds arrays of any size in one step the server cannot interrupt",
    "binary_upgrade_": "writes the catalogue",
    "brin_": "writes index state",
    "gin_clean_pending_list": "writes index state",
}
"""Functions (a name, or a prefix ending in ``_``) refused with their reason. The longest matching
entry gives the reason; every function not in :data:`ALLOWED_FUNCTIONS` is refused anyway."""

ALLOWED_TYPES: frozenset[str] = frozenset(
    "int2 int4 int8 smallint integer int bigint numeric decimal float4 float8 real "
    "double precision text varchar bpchar char character name citext bool boolean date time "
    "timetz timestamp timestamptz interval json jsonb uuid bytea inet cidr bit varbit money "
    "record".split()
)
"""Types a value may be cast to, by their names in ``pg_catalog``: plain data types. Casts to
``regclass``, ``regproc``, ``oid``, ``xml``, ``pg_lsn`` and other types of the catalogue or the
server (whose input functions look things up) are refused."""

PLAN_TYPES = frozenset({
    "smallint", "integer", "bigint", "numeric", "real", "double precision", "text",
    "character varying", "character", "bpchar", "\"char\"", "name", "boolean", "date",
    "time without time zone", "time with time zone", "timestamp without time zone",
    "timestamp with time zone", "interval", "json", "jsonb", "uuid", "bytea", "inet", "cidr",
    "bit", "bit varying", "money", "record", "unknown", "citext",
})
"""The same types as PostgreSQL writes them in a plan (``format_type``)."""

_IDENTITY = {
    "SVFOP_CURRENT_ROLE": "current_role", "SVFOP_CURRENT_USER": "current_user", "SVFOP_USER": "user",
    "SVFOP_SESSION_USER": "session_user", "SVFOP_CURRENT_CATALOG": "current_catalog",
    "SVFOP_CURRENT_SCHEMA": "current_schema",
}
"""SQL-standard functions written without parentheses that reveal the connection."""

_NODES = frozenset(
    "RawStmt SelectStmt ResTarget ColumnRef A_Star A_Const Integer Float Boolean String BitString "
    "A_Expr BoolExpr NullTest BooleanTest FuncCall TypeCast TypeName A_Indirection A_Indices "
    "A_ArrayExpr RowExpr CaseExpr CaseWhen CoalesceExpr MinMaxExpr SubLink RangeVar Alias "
    "RangeSubselect RangeFunction JoinExpr WithClause CommonTableExpr SortBy WindowDef GroupingSet "
    "GroupingFunc CollateClause SQLValueFunction ParamRef RangeTableSample ColumnDef "
    "CTESearchClause CTECycleClause".split()
)
"""The node types of libpg_query's tree a read query is made of; any other is refused by name
(a write, a utility statement, XML and JSON table functions, ``INTO``, locking clauses)."""

_TABLE_SAMPLES = frozenset({"system", "bernoulli"})


@dataclass(frozen=True)
class ServerNames:
    """What the server's catalogue says about names, read once per database.

    Attributes:
        functions: names of every function of ``pg_catalog`` and of the pinned schema (None: not
            known; a field selection of a name outside the allow-list is then refused unless it
            selects from a column).
        schema_functions: names of functions the database's own schema defines (an unqualified
            call of one of these may resolve there, so it is refused even where the allow-list
            has the name).
        columns: column names of the schema's relations (a field selection of one is a column).
        schema_operators: operator symbols the database's own schema defines (refused: their
            functions are the database's, not the server's reviewed ones).
        schema_types: names of types the database's own schema defines (enums, domains, row
            types), which plans show on constants and casts.
    """

    functions: frozenset[str] | None = None
    schema_functions: frozenset[str] = frozenset()
    columns: frozenset[str] = frozenset()
    schema_operators: frozenset[str] = frozenset()
    schema_types: frozenset[str] = frozenset()


def refusal(name: str) -> str | None:
    """The reason :data:`REFUSED_FUNCTIONS` gives for ``name`` (the longest matching entry).

    >>> refusal("pg_read_file")
    'reads files of the server'
    >>> refusal("upper") is None
    True
    """
    return refusal_reason(name, REFUSED_FUNCTIONS)


def _refused(name: str, sql: str, how: str = "") -> ForbiddenError:
    reason = refusal(name) or "it is not among the functions a query may call"
    reason = reason if reason.startswith("it is") else f"it {reason}"
    how = f" ({how})" if how else ""
    return ForbiddenError(f"{name} is not allowed: {reason}{how}; the query was refused.", sql=sql)


def _allowed(name: str) -> bool:
    return name in ALLOWED_FUNCTIONS and refusal(name) is None


# -- the first reading: the server's parser ---------------------------------------------------


def _pglast():
    try:
        import pglast
    except ImportError:
        raise DatabaseOpenError("PostgreSQL support is not installed: pip install 'sqlchorus[postgres]'") from None
    return pglast


def _walk(node: Any) -> Iterator[Any]:
    """Every node of libpg_query's tree under ``node``."""
    from pglast import ast

    if isinstance(node, (list, tuple)):
        for item in node:
            yield from _walk(item)
        return
    if not isinstance(node, ast.Node):
        return
    yield node
    # pglast's node classes set __slots__, which its annotations do not declare.
    for slot in type(node).__slots__:  # type: ignore[attr-defined]
        value = getattr(node, slot, None)
        if isinstance(value, (ast.Node, list, tuple)):
            yield from _walk(value)


def _names(items: Any) -> list[str]:
    return [getattr(i, "sval", None) or "" for i in items or ()]


def _enum_name(value: Any) -> str:
    return getattr(value, "name", str(value))


def _literal_int(node: Any) -> int | None:
    """The integer ``node`` writes out (``5``, ``'5'``, ``5::int``), or None."""
    from pglast import ast

    while isinstance(node, ast.TypeCast):
        node = node.arg
    if isinstance(node, ast.A_Const) and not node.isnull:
        value = node.val
        if isinstance(value, ast.Integer) and value.ival is not None:  # libpg_query always writes it
            return int(value.ival)
        if isinstance(value, ast.String):
            text = value.sval or ""
            if re.fullmatch(r"\s*[+-]?\d+\s*", text):
                return int(text)
    return None


def _literal_text(node: Any) -> str | None:
    from pglast import ast

    while isinstance(node, ast.TypeCast):
        node = node.arg
    if isinstance(node, ast.A_Const) and not node.isnull and isinstance(node.val, ast.String):
        return node.val.sval
    return None


_FORMAT_SPEC = re.compile(r"%(?:(\d+)\$)?([-]*)(\*(?:\d+\$)?|\d+)?([sIL%])?")


def _check_padding(name: str, args: list[Any], sql: str) -> None:
    """Refuse a padding call whose result size is not written out, or is over :data:`MAX_PAD`."""
    too_big = ForbiddenError(
        f"{name} is not allowed here: its size must be written out as a number of at most {MAX_PAD}; "
        "larger padding is one step the server cannot interrupt; the query was refused.", sql=sql)
    if name in ("lpad", "rpad"):
        width = _literal_int(args[1]) if len(args) >= 2 else None
        if width is None or width > MAX_PAD:
            raise too_big
    elif name == "repeat":
        count = _literal_int(args[1]) if len(args) >= 2 else None
        text = _literal_text(args[0]) if args else None
        if count is None or text is None or len(text) * max(count, 0) > MAX_PAD:
            raise too_big
    elif name == "format":
        spec = _literal_text(args[0]) if args else None
        if spec is None:
            raise ForbiddenError("format is not allowed here: its format string must be written out, so that "
                                 "its field widths can be checked; the query was refused.", sql=sql)
        for match in _FORMAT_SPEC.finditer(spec):
            field_width = match.group(3)
            if field_width and (field_width.startswith("*") or int(field_width) > MAX_PAD):
                raise too_big


def _column_rooted(node: Any) -> bool:
    """Whether ``node`` is a column reference, or a field or subscript of one."""
    from pglast import ast

    while isinstance(node, ast.A_Indirection):
        node = node.arg
    return isinstance(node, ast.ColumnRef)


def _query_aliases(tree: Any) -> set[str]:
    """Column names the statement itself gives: output names, aliases' column lists, CTE columns."""
    from pglast import ast

    out: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.ResTarget) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.Alias):
            out.update(_names(node.colnames))
        elif isinstance(node, ast.CommonTableExpr):
            out.update(_names(node.aliascolnames))
        elif isinstance(node, ast.ColumnDef) and node.colname:
            out.add(node.colname)
    return out


def _check_selection(name: str, base: Any, names: ServerNames, aliases: set[str], sql: str) -> None:
    """A field selection ``(base).name`` (or ``row.name``) is the call ``name(base)`` when
    ``base`` has no column ``name``: refuse it when it may be a call of a function that is not
    allowed. Selections from columns of known names are left to the plan, which shows the server's
    resolution."""
    if _allowed(name) and name not in PADDING and name not in names.schema_functions:
        return
    if names.functions is None:
        if _column_rooted(base) and (refusal(name) is None or name in aliases):
            return  # which names are functions is not known here: the plan shows the server's reading
    elif name not in names.functions and name not in names.schema_functions:
        return  # no function has this name: a column or nothing
    elif _column_rooted(base) and (name in names.columns or name in aliases):
        return  # a column of a row in scope, by name; the plan says whether the server agrees
    raise _refused(name, sql, "called in field-selection notation")


def _check_operator(parts: list[str], names: ServerNames, sql: str) -> None:
    if len(parts) > 1 and parts[-2] != "pg_catalog":
        raise ForbiddenError(f"The operator {'.'.join(parts)} is not allowed: only the server's own operators "
                             "may be used; the query was refused.", sql=sql)
    if parts and parts[-1] in names.schema_operators:
        raise ForbiddenError(f"The operator {parts[-1]} is not allowed: the database's schema defines one of "
                             "that name, whose function the guard has not reviewed; the query was refused.", sql=sql)


def check_statement(sql: str, *, schema: str = "public", names: ServerNames | None = None,
                    functions: bool = True) -> list[str]:
    """Check ``sql`` as PostgreSQL's parser reads it: one read query whose every call, cast,
    operator and construct a question may use (see the module's text).

    Returns:
        The padding functions it calls explicitly, checked here (their calls in a plan are these).

    Raises:
        NotAQueryError: the text does not parse as PostgreSQL, holds several statements or a
            statement that is not a query.
        ForbiddenError: it calls, casts to or uses something not allowed, naming it and why.
    """
    pglast = _pglast()
    from pglast import ast

    names = names or ServerNames()
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError as e:
        raise NotAQueryError(f"The SQL does not parse as PostgreSQL: {e}.", sql=sql) from None
    if len(statements) != 1:
        raise NotAQueryError(f"Expected exactly one statement, found {len(statements)}.", sql=sql)
    stmt = statements[0].stmt
    if not isinstance(stmt, ast.SelectStmt):
        raise NotAQueryError(f"Only read queries may run; this statement is {type(stmt).__name__}.", sql=sql)
    aliases = _query_aliases(stmt)
    padding: list[str] = []
    for node in _walk(statements[0]):
        kind = type(node).__name__
        if kind not in _NODES:
            raise ForbiddenError(f"The query uses {kind}, which the guard does not allow: only reading with "
                                 "the functions a question needs may run; the query was refused.", sql=sql)
        if isinstance(node, ast.SelectStmt):
            if node.intoClause is not None:
                raise ForbiddenError("SELECT INTO is not allowed: it creates a table; the query was refused.", sql=sql)
            if node.lockingClause:
                raise ForbiddenError("FOR UPDATE/FOR SHARE is not allowed: it locks rows; the query was refused.",
                                     sql=sql)
        elif isinstance(node, ast.CommonTableExpr) and not isinstance(node.ctequery, ast.SelectStmt):
            raise ForbiddenError(f"A WITH query that is {type(node.ctequery).__name__} is not allowed: only reading "
                                 "may run; the query was refused.", sql=sql)
        elif isinstance(node, ast.RangeVar):
            if node.catalogname:
                raise ForbiddenError(f"{node.catalogname}.{node.schemaname}.{node.relname} is not allowed: it is a "
                                     "table of another database; the query was refused.", sql=sql)
            if node.schemaname and node.schemaname != schema:
                raise ForbiddenError(f"{node.schemaname}.{node.relname} is not allowed: it is a table outside "
                                     f"schema {schema}; the query was refused.", sql=sql)
        elif isinstance(node, ast.RangeTableSample):
            method = _names(node.method)
            if method[-1:] and (method[-1] not in _TABLE_SAMPLES or len(method) > 1):
                raise ForbiddenError(f"TABLESAMPLE {'.'.join(method)} is not allowed: only SYSTEM and BERNOULLI "
                                     "sample; the query was refused.", sql=sql)
        elif functions and isinstance(node, ast.FuncCall):
            parts = _names(node.funcname)
            name = parts[-1] if parts else ""
            if len(parts) > 2 or (len(parts) == 2 and parts[0] != "pg_catalog"):
                raise ForbiddenError(f"{'.'.join(parts)} is not allowed: only the server's own functions "
                                     f"(pg_catalog) may be called; the query was refused.", sql=sql)
            if not _allowed(name):
                raise _refused(name, sql)
            if len(parts) == 1 and name in names.schema_functions:
                raise ForbiddenError(f"{name} is not allowed: the database's schema defines a function of that "
                                     "name, which the call may resolve to; the query was refused.", sql=sql)
            if name in PADDING:
                _check_padding(name, list(node.args or ()), sql)
                padding.append(name)
        elif functions and isinstance(node, ast.A_Indirection):
            for item in node.indirection or ():
                if isinstance(item, ast.String):
                    _check_selection(item.sval or "", node.arg, names, aliases, sql)
        elif functions and isinstance(node, ast.ColumnRef):
            strings = [f for f in node.fields or () if isinstance(f, ast.String)]
            if len(strings) >= 2 and len(strings) == len(node.fields or ()):
                # row.name, schema.table.name: the last name is a call when it is no column.
                _check_selection(strings[-1].sval or "", node, names, aliases, sql)
        elif functions and isinstance(node, ast.SQLValueFunction):
            op = _enum_name(node.op)
            if op in _IDENTITY:
                raise _refused(_IDENTITY[op], sql)
        elif functions and isinstance(node, ast.TypeCast):
            _check_type(node.typeName, names, sql)
        elif functions and isinstance(node, ast.ColumnDef) and node.typeName is not None:
            _check_type(node.typeName, names, sql)
        elif functions and isinstance(node, ast.A_Expr) and _enum_name(node.kind) not in ("AEXPR_IN",):
            _check_operator(_names(node.name), names, sql)
        elif functions and isinstance(node, ast.SortBy) and node.useOp:
            _check_operator(_names(node.useOp), names, sql)
        elif functions and isinstance(node, ast.SubLink) and node.operName:
            _check_operator(_names(node.operName), names, sql)
    return padding


def _check_type(type_name: Any, names: ServerNames, sql: str) -> None:
    parts = _names(type_name.names)
    name = parts[-1] if parts else ""
    if type_name.setof or type_name.pct_type:
        raise ForbiddenError("A %TYPE or SETOF type is not allowed; the query was refused.", sql=sql)
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "pg_catalog"):
        raise ForbiddenError(f"The cast to {'.'.join(parts)} is not allowed: only plain data types may be cast "
                             "to; the query was refused.", sql=sql)
    if name not in ALLOWED_TYPES and not (len(parts) == 1 and name in names.schema_types):
        raise ForbiddenError(f"The cast to {name} is not allowed: only plain data types may be cast to (this one "
                             "looks into the server or its catalogue); the query was refused.", sql=sql)


# -- the second reading: the server's plan ----------------------------------------------------


_NOT_EXPRESSIONS = frozenset({
    "Node Type", "Parent Relationship", "Subplan Name", "Relation Name", "Schema", "Alias",
    "Index Name", "CTE Name", "Strategy", "Partial Mode", "Join Type", "Scan Direction",
    "Command", "Operation", "Sort Method", "Sort Space Type", "Function Name", "Table Function Name",
    "Parallel Aware", "Async Capable", "Inner Unique", "Single Copy", "Setop", "Hash Buckets",
})

_SYNTAX_CALLS = frozenset({
    # Upper-case words a plan writes before a parenthesis: syntax, not function names (a function
    # of an upper-case name would be written quoted).
    "ROW", "ARRAY", "ANY", "ALL", "EXISTS", "COALESCE", "GREATEST", "LEAST", "NULLIF", "OVER",
    "FILTER", "EXTRACT", "OVERLAY", "POSITION", "SUBSTRING", "TRIM", "NORMALIZE", "IN", "VALUES",
    "PARTIAL", "FINALIZE", "GROUP", "WITHIN", "CASE", "WHEN", "THEN", "ELSE", "END", "AND", "OR",
    "NOT", "IS", "NULL", "DISTINCT", "ORDER", "BY", "AS", "FROM", "FOR", "BOTH", "LEADING",
    "TRAILING", "AT", "TIME", "ZONE", "LIKE", "ILIKE", "SIMILAR", "TO", "ESCAPE", "ROWS",
    "COLLATE", "CAST", "ASC", "DESC", "NULLS", "FIRST", "LAST", "USING", "SubPlan", "InitPlan",
    "hashed", "alternatives", "WITH", "ORDINALITY", "LATERAL", "BETWEEN", "SYMMETRIC",
})

_IDENTITY_WORDS = frozenset({"CURRENT_USER", "CURRENT_ROLE", "SESSION_USER", "USER", "CURRENT_CATALOG",
                             "CURRENT_SCHEMA", "SYSTEM_USER"})

_TOKEN = re.compile(
    r"""(?P<string>[Ee]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*')
      | (?P<quoted>"(?:[^"]|"")+")
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<cast>::)
      | (?P<space>\s+)
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)

_TYPE_WORDS = frozenset({"varying", "precision", "with", "without", "time", "zone"})


@dataclass
class PlanCalls:
    """What a plan calls and reads: function names (with their schema, when written), the
    types it casts to, the relations it scans and the identity keywords it evaluates."""

    functions: list[tuple[str | None, str]] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    relations: list[tuple[str | None, str]] = field(default_factory=list)
    identity: list[str] = field(default_factory=list)


def _identifier(token: re.Match) -> str:
    if token.lastgroup == "quoted":
        return token.group("quoted")[1:-1].replace('""', '"')
    return token.group("word")


def _scan_expression(text: str, out: PlanCalls) -> None:
    """Add the calls, casts and identity keywords of one expression as a plan writes it."""
    tokens = [t for t in _TOKEN.finditer(text) if t.lastgroup != "space"]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind = token.lastgroup
        if kind == "cast":
            i = _scan_type(tokens, i + 1, out)
            continue
        if kind in ("word", "quoted"):
            parts = [token]
            j = i + 1
            while j + 1 < len(tokens) and tokens[j].group() == "." and tokens[j + 1].lastgroup in ("word", "quoted"):
                parts.append(tokens[j + 1])
                j += 2
            follows = tokens[j].group() if j < len(tokens) else ""
            last = parts[-1]
            if follows == "(":
                word = last.group()
                if not (last.lastgroup == "word" and (word.isupper() or word in _SYNTAX_CALLS)):
                    schema = _identifier(parts[-2]) if len(parts) >= 2 else None
                    out.functions.append((schema, _identifier(last)))
            elif len(parts) == 1 and kind == "word" and token.group() in _IDENTITY_WORDS:
                out.identity.append(token.group().lower())
            i = j
            continue
        i += 1


def _scan_type(tokens: list[re.Match], i: int, out: PlanCalls) -> int:
    """Read the type name written after ``::`` from ``tokens[i]``; the index after it."""
    words: list[str] = []
    while i < len(tokens):
        token = tokens[i]
        # A type's first word, a word of a type of several (double precision), or the name after
        # a schema's dot.
        if token.lastgroup in ("word", "quoted") and (not words or words[-1].endswith(".")
                                                      or token.group() in _TYPE_WORDS):
            words.append(token.group())
            i += 1
            if i < len(tokens) and tokens[i].group() == "." and not words[1:]:
                i += 1  # a schema-qualified type: the schema is kept in the name
                words[-1] += "."
                continue
        elif token.group() == "(" and words:
            depth = 0
            while i < len(tokens):  # a type modifier: (10), (10,2)
                depth += {"(": 1, ")": -1}.get(tokens[i].group(), 0)
                i += 1
                if depth == 0:
                    break
        else:  # an array's brackets too: they hold nothing the check reads
            break
    if words:
        name = " ".join(words).replace(". ", ".")
        out.types.append(name)
    return i


def plan_calls(plan: Any) -> PlanCalls:
    """What the plan ``plan`` (``EXPLAIN (VERBOSE, FORMAT JSON)``'s document, parsed or as text)
    calls, casts to and scans.

    >>> calls = plan_calls([{"Plan": {"Node Type": "Result", "Output": ["pg_read_file('/etc/hostname'::text)"]}}])
    >>> calls.functions, calls.types
    ([(None, 'pg_read_file')], ['text'])
    """
    if isinstance(plan, (str, bytes)):
        plan = json.loads(plan)
    out = PlanCalls()

    def visit(value: Any, key: str | None = None) -> None:
        if isinstance(value, dict):
            if "Relation Name" in value:
                out.relations.append((value.get("Schema"), value["Relation Name"]))
            for k, v in value.items():
                if k not in _NOT_EXPRESSIONS:
                    visit(v, k)
        elif isinstance(value, list):
            for item in value:
                visit(item, key)
        elif isinstance(value, str) and key is not None:
            _scan_expression(value, out)

    visit(plan)
    return out


def check_plan(plan: Any, sql: str, *, schema: str = "public", names: ServerNames | None = None,
               padding: list[str] | tuple[str, ...] = ()) -> None:
    """Check what the server resolved ``sql`` to (its plan ``plan``): every function one the
    guard allows (of ``pg_catalog``), every cast to a plain data type or one of the schema's own
    types, every relation one of ``schema``. ``padding`` are the padding functions the statement
    calls explicitly (checked by :func:`check_statement`); a call of another is refused.

    Raises:
        ForbiddenError: naming what the server would have called, cast to or read.
    """
    names = names or ServerNames()
    calls = plan_calls(plan)
    for word in calls.identity:
        raise _refused(word, sql, "as the server resolved the query")
    for qualifier, name in calls.functions:
        if qualifier not in (None, "pg_catalog"):
            raise ForbiddenError(f"{qualifier}.{name} is not allowed: only the server's own functions (pg_catalog) "
                                 "may be called; the query was refused.", sql=sql)
        if not _allowed(name) or (qualifier is None and name in names.schema_functions):
            raise _refused(name, sql, "as the server resolved the query")
        if name in PADDING and name not in padding:
            raise _refused(name, sql, "as the server resolved the query: a padding call not written out")
    for type_name in calls.types:
        base = type_name.removeprefix("pg_catalog.")
        if base not in PLAN_TYPES and base.strip('"') not in names.schema_types:
            raise ForbiddenError(f"The cast to {type_name} is not allowed: only plain data types may be cast to; "
                                 "the query was refused.", sql=sql)
    for rel_schema, relation in calls.relations:
        if rel_schema is not None and rel_schema != schema:
            raise ForbiddenError(f"{rel_schema}.{relation} is not allowed: it is a table outside schema {schema}; "
                                 "the query was refused.", sql=sql)
