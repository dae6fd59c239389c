"""``degenerate``: a result of one row whose every value is 0 or NULL votes like an empty one.

An aggregate over no rows is not empty: ``COUNT(*)`` gives one row holding 0, ``SUM`` and ``AVG``
one row holding NULL. Such a result usually says that the query's filter matched nothing (a
value spelt otherwise than in the database, a join on the wrong key), the same wrong reasons
for which empty results agree; so it votes only when no candidate has another result with rows,
or when such results hold most of the votes (``agreed_degenerate``).
The cost: a question whose answer is truly 0 loses when some candidate counts something else.
"""

from __future__ import annotations

NAME = "degenerate"
WHY = "a count of 0 or a NULL aggregate is an empty result in disguise"


def apply(ballot) -> None:
    if ballot.degenerate_stands:
        return
    ballot.set_aside(NAME, (k for k in ballot.voters if ballot.candidates[k].get("degenerate")),
                     "result(s) of one row of zeros or NULLs")
