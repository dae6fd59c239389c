"""``key_only``: a result made only of key values, to a question that does not ask for keys,
votes only when no candidate answers otherwise.

A query that returns an integer key column (a primary key, a foreign key, or a column one
references) where the question asks for the thing itself ("Which airline ...", "What kind of
program ...") has answered with the key of the right rows rather than what they are called;
several systems make that mistake together. The rule reads the result's column names and
values, the schema's keys and the question's words: a question that says id, code, number or
key is taken to ask for keys, and then the rule does nothing.
"""

from __future__ import annotations

import re

NAME = "key_only"
WHY = "a key where the question asks for the thing itself is the right rows named wrongly"
ASKS_FOR_KEYS = re.compile(r"\b(ids?|codes?|numbers?|keys?|identifiers?)\b", re.IGNORECASE)


def keys_only(candidate, key_columns: frozenset[str]) -> bool:
    """Whether every column of ``candidate``'s result is a key column holding whole numbers."""
    names = candidate.get("column_names") or []
    integral = candidate.get("integer_columns") or []
    if candidate.get("status") != "ok" or not names or len(names) != len(integral):
        return False
    return all(integral[j] and name.rsplit(".", 1)[-1].strip('"`[]').lower() in key_columns
               for j, name in enumerate(names))


def apply(ballot) -> None:
    if not ballot.key_columns or ASKS_FOR_KEYS.search(ballot.question or ""):
        return
    ballot.set_aside(NAME, (k for k in ballot.voters if keys_only(ballot.candidates[k], ballot.key_columns)),
                     "result(s) of key values only, to a question that asks for no key")
