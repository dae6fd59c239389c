"""``empty``: an empty result votes only when no candidate has rows.

Empty results agree with each other for many different wrong reasons (a misspelt value, a join
on the wrong key), so a few of them outvote one result with rows that was right: those are set
aside (unless ``agreed_empty`` found most of the votes on them).
"""

from __future__ import annotations

NAME = "empty"
WHY = "a few empty results agree with each other for many different wrong reasons"


def apply(ballot) -> None:
    if ballot.empty_stands:
        return
    ballot.set_aside(NAME, (k for k in ballot.voters if ballot.candidates[k].get("status") == "empty"),
                     "empty result(s)")
