"""What a MySQL or MariaDB statement may call, read by the server's own rules of reading text.

There is no library of the server's parser to read a statement with, and sqlglot's reading is
not the server's: ``/*! ... */`` is a comment to sqlglot and code to the server, ``#`` starts a
comment, a quoted name followed by ``(`` is a call of a built-in function (```sleep`(5)``), and
``1--sleep(5)`` is arithmetic. So two readings here, each enough on its own for what it sees:

1. :func:`check_text` splits the text into tokens exactly as the server's lexer does (strings
   with backslash escapes, quoted names, ``#``, ``-- `` and ``/* */`` comments) and refuses what
   a question about the data never needs, wherever it stands: executable comments and optimizer
   hints (``/*!``, ``/*M!``, ``/*+``: a hint can lift the time limit), variables (``@x``,
   ``@@datadir``, ``@x := 1``), ``INTO`` (``OUTFILE``, ``DUMPFILE``, variables), ``FOR UPDATE``,
   ``LOCK IN SHARE MODE``, ``PROCEDURE``, sequences (``NEXT VALUE FOR``, ``PREVIOUS VALUE
   FOR``), more than one statement, and every call of a function that is not on
   :data:`ALLOWED_FUNCTIONS` (the dangerous ones of :data:`REFUSED_FUNCTIONS` named with the
   reason), a stored function of a database (``db.f(...)``) or a bare word the server reads as a
   call (``CURRENT_USER``).
2. :func:`check_note` reads the statement as the server resolved it: the text MariaDB (and
   MySQL) print after ``EXPLAIN EXTENDED`` in the note ``SHOW WARNINGS`` gives (1003), taken in
   the statement's own read-only transaction, under its time limit. Every call there is the one
   the server will make (an executable comment's calls included, ``length`` printed as
   ``octet_length``, a stored function as `` `db`.`f`(...) ``), and every column of a table is
   named with its database. Calls the optimizer evaluated while planning (a constant subquery)
   may have been folded away, which is why the first reading refuses them before the server
   sees them.

>>> check_text("SELECT upper(name) FROM singer")
>>> check_text("SELECT 1 /*! , LOAD_FILE('/etc/passwd') */")
Traceback (most recent call last):
...
sqlchorus.tools.sql.errors.ForbiddenError: The query holds an executable comment or an optimizer hint (/*!, /*M!, /*+), which the guard does not allow: a hint can lift the time limit and a comment can hide code; it was refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sqlchorus.tools.sql.errors import ForbiddenError, NotAQueryError, refusal_reason

__all__ = [
    "ALLOWED_FUNCTIONS", "REFUSED_FUNCTIONS", "SYSTEM_SCHEMAS", "Token", "calls", "check_note", "check_text",
    "refusal", "tokens",
]

ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    # conditionals and comparisons
    "if ifnull nullif coalesce isnull nvl nvl2 greatest least interval strcmp".split()
    # strings
    + "ascii bin bit_length char char_length character_length chr concat concat_ws elt export_set "
    "field find_in_set format hex insert instr lcase left length lengthb locate lower lpad ltrim "
    "make_set mid oct octet_length ord position quote repeat replace reverse right rpad rtrim "
    "soundex space substr substring substring_index trim ucase unhex upper regexp_replace "
    "regexp_instr regexp_substr regexp_like to_base64 from_base64 md5 sha sha1 sha2 crc32 crc32c "
    "match against weight_string natural_sort_key to_char".split()
    # numbers
    + "abs acos asin atan atan2 ceil ceiling conv cos cot degrees exp floor ln log log10 log2 mod "
    "pi pow power radians rand round sign sin sqrt tan truncate".split()
    # dates and times
    + "adddate addtime convert_tz curdate current_date current_time current_timestamp curtime date "
    "date_add date_format date_sub datediff day dayname dayofmonth dayofweek dayofyear extract "
    "from_days from_unixtime get_format hour last_day localtime localtimestamp makedate maketime "
    "microsecond minute month monthname now period_add period_diff quarter sec_to_time second "
    "str_to_date subdate subtime sysdate time time_format time_to_sec timediff timestamp "
    "timestampadd timestampdiff to_days to_seconds unix_timestamp utc_date utc_time utc_timestamp "
    "week weekday weekofyear year yearweek add_months months_between".split()
    # aggregates
    + "avg bit_and bit_or bit_xor count group_concat json_arrayagg json_objectagg max min std stddev "
    "stddev_pop stddev_samp sum var_pop var_samp variance any_value grouping".split()
    # window functions
    + "cume_dist dense_rank first_value lag last_value lead nth_value ntile percent_rank rank "
    "row_number percentile_cont percentile_disc median".split()
    # JSON values
    + "json_array json_array_append json_array_insert json_contains json_contains_path json_depth "
    "json_extract json_insert json_keys json_length json_merge json_merge_patch json_merge_preserve "
    "json_object json_overlaps json_quote json_remove json_replace json_search json_set json_type "
    "json_unquote json_valid json_value json_query json_exists json_compact json_detailed "
    "json_loose json_pretty json_equals json_normalize".split()
    # casts and conversions, and row constructors
    + "cast convert binary row".split()
)
"""Built-in functions a query may call: conditionals, text, numbers, dates, aggregates, window
functions, JSON values and casts. Each computes from its arguments only; none reads a file,
waits, takes a lock, touches a sequence or reveals the session, the server or its settings.
Text that grows (``repeat``, ``lpad``, ``space``, ``group_concat``) is bounded by the server
itself (``max_allowed_packet``, ``group_concat_max_len``): past it the result is NULL."""

REFUSED_FUNCTIONS: dict[str, str] = {
    "load_file": "reads files of the server",
    "sleep": "only waits, for as long as it is told",
    "benchmark": "runs an expression as many times as it is told",
    "get_lock": "takes a lock that outlives the statement",
    "release_lock": "releases locks",
    "release_all_locks": "releases locks",
    "is_free_lock": "inspects other sessions' locks",
    "is_used_lock": "inspects other sessions' locks",
    "master_pos_wait": "waits for replication",
    "master_gtid_wait": "waits for replication",
    "source_pos_wait": "waits for replication",
    "wait_for_executed_gtid_set": "waits for replication",
    "wait_until_sql_thread_after_gtids": "waits for replication",
    "user": "reveals the session's user",
    "current_user": "reveals the session's user",
    "current_role": "reveals the session's roles",
    "session_user": "reveals the session's user",
    "system_user": "reveals the session's user",
    "database": "reveals the session's database",
    "schema": "reveals the session's database",
    "version": "reveals the server's build",
    "connection_id": "reveals the session",
    "last_insert_id": "reveals the session's state",
    "row_count": "reveals the session's state",
    "found_rows": "reveals the session's state",
    "nextval": "advances a sequence",
    "setval": "changes a sequence",
    "lastval": "reveals the session's state",
    "uuid_short": "reveals the server's identity",
    "ps_": "reveals other sessions (performance_schema)",
    "sys_exec": "runs programs on the server (a loadable function)",
    "sys_eval": "runs programs on the server (a loadable function)",
    "json_table": "makes a table of its own the guard does not read through",
    "column_": "reads dynamic columns the guard has not reviewed",
    "updatexml": "is not needed by a question and is used to leak values through errors",
    "extractvalue": "is not needed by a question and is used to leak values through errors",
}
"""Functions refused with the reason (a key ending in ``_`` is a prefix)."""

SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})
"""The server's own databases: its catalogue, its users and grants, other sessions, its settings."""

_BARE_CALLS = frozenset({"current_user", "current_role"})
"""Words the server reads as calls without parentheses that a question never needs."""

_NOT_CALLS = frozenset(
    # keywords a parenthesis may follow without a call
    "select from where and or xor not in exists as join on using over union all distinct having "
    "with when then else case is like rlike regexp sounds between div by limit offset group order "
    "partition window recursive left right inner outer cross straight_join natural lateral any some "
    "escape collate asc desc rows range preceding following unbounded current except intersect "
    "null into values table dual end set".split()
    # types after CAST/CONVERT, and widths of types
    + "decimal dec numeric char varchar nchar nvarchar binary varbinary datetime time date timestamp "
    "double float real signed unsigned integer int bigint json charset character".split()
)
"""Words a parenthesis follows that are not calls: keywords and type names. ``left``, ``right``,
``char``, ``date``, ``time``, ``timestamp``, ``insert``, ``binary`` and ``row`` are functions as
well; they are on the allow-list either way."""

_INTERNAL_CALLS = frozenset({"trigcond"})
"""Names the server prints in its reading of a statement that no one can write."""

_SKIPPED = (_NOT_CALLS | _INTERNAL_CALLS) - ALLOWED_FUNCTIONS - frozenset(REFUSED_FUNCTIONS)
"""Words followed by a parenthesis that are never a call (a function of the same name is checked)."""

_WORD = re.compile(r"[A-Za-z0-9_$\u0080-\uffff]+")
_SEQUENCE_TABLE = re.compile(r"seq_\d+_to_\d+(?:_step_\d+)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    """One token of a statement as the server's lexer splits it: ``kind`` is ``word`` (a bare
    word: a keyword or a name), ``name`` (a quoted name, ``text`` without its backquotes),
    ``string``, ``variable``, ``hidden`` (an executable comment or an optimizer hint) or
    ``punct`` (one character)."""

    kind: str
    text: str
    start: int


def tokens(sql: str) -> list[Token]:
    """The tokens of ``sql`` by the server's rules for its default SQL mode (the guard's sessions
    pin it: no ``ANSI_QUOTES``, no ``NO_BACKSLASH_ESCAPES``): comments dropped, except executable
    ones and hints, which come back as ``hidden`` tokens.

    Raises:
        NotAQueryError: an unterminated string, quoted name or comment.
    """
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif ch == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2].isspace() or ord(sql[i + 2]) < 32)):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise NotAQueryError("The SQL text has a comment that is never closed.", sql=sql)
            if sql.startswith(("/*!", "/*M!", "/*m!", "/*+"), i):
                out.append(Token("hidden", sql[i:end + 2], i))
            i = end + 2
        elif ch in "'\"":
            j = i + 1
            while True:
                if j >= n:
                    raise NotAQueryError("The SQL text has a string that is never closed.", sql=sql)
                if sql[j] == "\\":
                    j += 2
                elif sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:  # a doubled quote stands for one
                        j += 2
                    else:
                        break
                else:
                    j += 1
            out.append(Token("string", sql[i:j + 1], i))
            i = j + 1
        elif ch == "`":
            j = i + 1
            while True:
                j = sql.find("`", j)
                if j < 0:
                    raise NotAQueryError("The SQL text has a quoted name that is never closed.", sql=sql)
                if j + 1 < n and sql[j + 1] == "`":
                    j += 2
                else:
                    break
            out.append(Token("name", sql[i + 1:j].replace("``", "`"), i))
            i = j + 1
        elif ch == "@":
            match = _WORD.match(sql, i + 1 + (sql.startswith("@@", i)))
            end = match.end() if match else i + 1
            out.append(Token("variable", sql[i:end], i))
            i = end
        else:
            match = _WORD.match(sql, i)
            if match:
                out.append(Token("word", match.group(), i))
                i = match.end()
            else:
                out.append(Token("punct", ch, i))
                i += 1
    return out


@dataclass(frozen=True)
class Call:
    """A call of a function: its ``name`` (lower case), whether it was ``qualified`` by a
    database (a stored function), and whether it was written ``bare`` (without parentheses)."""

    name: str
    qualified: bool = False
    bare: bool = False


def calls(toks: list[Token], *, not_calls: Iterable[str] = ()) -> list[Call]:
    """The calls among ``toks``: a word or a quoted name followed by ``(`` (the server lets a
    stored function's name be followed by spaces first, so they are allowed here too), unless
    it is a keyword or type that a parenthesis may follow, one of ``not_calls`` (the names of
    common table expressions), or an alias's column list (``AS t(a, b)``); and the bare words the
    server reads as calls."""
    skip = {n.lower() for n in not_calls}
    out: list[Call] = []
    for i, tok in enumerate(toks):
        if tok.kind not in ("word", "name"):
            continue
        name = tok.text.lower()
        following = toks[i + 1] if i + 1 < len(toks) else None
        before = toks[i - 1] if i > 0 else None
        qualified = before is not None and before.kind == "punct" and before.text == "."
        if following is not None and following.kind == "punct" and following.text == "(":
            if qualified:
                out.append(Call(name, qualified=True))
                continue
            if tok.kind == "word" and name in _SKIPPED:
                continue
            if name in skip or (before is not None and before.kind == "word" and before.text.lower() == "as"):
                continue
            out.append(Call(name))
        elif tok.kind == "word" and name in _BARE_CALLS and not qualified:
            out.append(Call(name, bare=True))
    return out


def refusal(name: str) -> str | None:
    """The reason :data:`REFUSED_FUNCTIONS` gives for ``name`` (the longest matching entry).

    >>> refusal("load_file")
    'reads files of the server'
    >>> refusal("upper") is None
    True
    """
    return refusal_reason(name, REFUSED_FUNCTIONS)


def _check_call(call: Call, sql: str, where: str = "") -> None:
    if call.qualified:
        raise ForbiddenError(f"{call.name} is not allowed: it is a stored function of a database, and only the "
                             f"server's own functions may run{where}; the query was refused.", sql=sql)
    reason = refusal(call.name)
    if reason is None and call.name in ALLOWED_FUNCTIONS:
        return
    reason = f"it {reason}" if reason else "it is not among the functions a query may call"
    how = " (written without parentheses)" if call.bare else ""
    raise ForbiddenError(f"{call.name} is not allowed: {reason}{how}{where}; the query was refused.", sql=sql)


def _words(toks: list[Token]) -> list[str]:
    return [t.text.lower() if t.kind == "word" else "" for t in toks]


def _check_words(toks: list[Token], sql: str) -> None:
    """Refuse the clauses a read never needs: INTO, row locks, PROCEDURE, sequences."""
    words = _words(toks)
    for i, word in enumerate(words):
        after = words[i + 1] if i + 1 < len(words) else ""
        if word == "into":
            raise ForbiddenError("The query writes its result somewhere (INTO a file or variables), which the guard "
                                 "does not allow; it was refused.", sql=sql)
        if (word == "for" and after in ("update", "share")) or (word == "lock" and after == "in"):
            raise ForbiddenError("The query locks rows (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE), which the guard "
                                 "does not allow; it was refused.", sql=sql)
        if word == "procedure":
            raise ForbiddenError("The query calls a procedure (PROCEDURE), which the guard does not allow; it was "
                                 "refused.", sql=sql)
        if word == "value" and after == "for" and i > 0 and words[i - 1] in ("next", "previous"):
            raise ForbiddenError(f"The query reads a sequence ({words[i - 1].upper()} VALUE FOR), which the guard "
                                 "does not allow; it was refused.", sql=sql)


def check_text(sql: str, *, not_calls: Iterable[str] = (), functions: bool = True) -> None:
    """Refuse ``sql`` unless, read as the server reads text, it is one statement that holds no
    executable comment, hint, variable, INTO, row lock, PROCEDURE or sequence, and calls only
    the functions of :data:`ALLOWED_FUNCTIONS` (``not_calls``: names that are not calls where a
    parenthesis follows them, the common table expressions'; without ``functions``, calls are
    not checked).

    Raises:
        NotAQueryError: an unterminated string, quoted name or comment, or several statements.
        ForbiddenError: anything else above.
    """
    toks = tokens(sql)
    for i, tok in enumerate(toks):
        if tok.kind == "hidden":
            raise ForbiddenError("The query holds an executable comment or an optimizer hint (/*!, /*M!, /*+), which "
                                 "the guard does not allow: a hint can lift the time limit and a comment can hide "
                                 "code; it was refused.", sql=sql)
        if tok.kind == "variable":
            raise ForbiddenError(f"The query uses the variable {tok.text}, which the guard does not allow: variables "
                                 "keep state between statements or reveal the server's settings; it was refused.",
                                 sql=sql)
        if tok.kind == "punct" and tok.text == ";" and any(t.text != ";" for t in toks[i + 1:]):
            raise NotAQueryError("Expected exactly one statement, found several.", sql=sql)
    _check_words(toks, sql)
    if functions:
        for call in calls(toks, not_calls=not_calls):
            _check_call(call, sql)


def sequence_table(name: str) -> bool:
    """Whether ``name`` is one MariaDB's sequence engine makes up in any database
    (``seq_1_to_1000000``): as many rows as it is asked for, read from no table."""
    return bool(_SEQUENCE_TABLE.match(name))


def check_note(note: str, sql: str, *, database: str, not_calls: Iterable[str] = ()) -> None:
    """Refuse ``sql`` unless the server's reading of it (``note``, the text of ``EXPLAIN
    EXTENDED``'s note 1003) calls only allowed functions, uses no variable, writes nowhere, and
    reads columns of tables of ``database`` only (the server names every such column
    `` `database`.`table`.`column` ``) and nothing of its own databases
    (:data:`SYSTEM_SCHEMAS`). ``not_calls``: the statement's common table expressions, which the
    server prints with their column lists (``n(i)``).

    Raises:
        ForbiddenError: with what the server's reading shows, never the reading itself (it may
            hold a constant the optimizer computed).
    """
    where = " (in the server's reading of the query)"
    toks = tokens(note)
    for tok in toks:
        if tok.kind == "variable":
            raise ForbiddenError(f"The query uses the variable {tok.text}{where}, which the guard does not allow; it "
                                 "was refused.", sql=sql)
    words = _words(toks)
    if "into" in words:
        raise ForbiddenError(f"The query writes its result somewhere{where}, which the guard does not allow; it was "
                             "refused.", sql=sql)
    for call in calls(toks, not_calls=not_calls):
        _check_call(call, sql, where)
    # Chains of quoted names joined by dots: `db`.`table`.`column`, `db`.`table`, `alias`.`column`.
    i = 0
    while i < len(toks):
        if toks[i].kind != "name":
            i += 1
            continue
        chain = [toks[i].text]
        j = i + 1
        while j + 1 < len(toks) and toks[j].kind == "punct" and toks[j].text == "." and toks[j + 1].kind == "name":
            chain.append(toks[j + 1].text)
            j += 2
        if len(chain) >= 2 and chain[0].lower() in SYSTEM_SCHEMAS:
            raise ForbiddenError(f"The query reads {chain[0]}.{chain[1]}, a table of the server's catalogue{where}, "
                                 "which the guard does not allow; it was refused.", sql=sql)
        # A table the statement reads is printed `db`.`table` after FROM or JOIN (a derived table's
        # column, `alias`.`column`, never stands there); a column of a table, `db`.`table`.`column`.
        before = toks[i - 1] if i > 0 else None
        if before is not None and before.kind == "punct" and before.text == "(" and i > 1:
            before = toks[i - 2]
        reads = before is not None and before.kind == "word" and before.text.lower() in ("from", "join",
                                                                                          "straight_join")
        if ((reads and len(chain) == 2) or len(chain) >= 3) and chain[0] != database:
            raise ForbiddenError(f"The query reads {chain[0]}.{chain[1]}, a table of another database{where}, which "
                                 "the guard does not allow; it was refused.", sql=sql)
        i = j
