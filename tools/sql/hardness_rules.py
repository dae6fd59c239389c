"""Spider's hardness rule, and hardness from Spider's own parsed ``sql`` dictionary.

These need no SQL parser, so loading Spider dev for scoring does not import one: Spider's
``dev.json`` carries each query parsed into its ``sql`` dictionary, the structure the official
scorer computes hardness from. :mod:`sqlchorus.tools.sql.hardness` computes the same counts from SQL
text, and is tested against :func:`hardness_from_spider_sql` on Spider dev.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HARDNESS_LEVELS = ("easy", "medium", "hard", "extra")

__all__ = [
    "HARDNESS_LEVELS",
    "HardnessCounts",
    "classify_hardness",
    "hardness_counts_from_spider_sql",
    "hardness_from_spider_sql",
]


@dataclass(frozen=True)
class HardnessCounts:
    component1: int
    component2: int
    others: int

    @property
    def hardness(self) -> str:
        return classify_hardness(self.component1, self.component2, self.others)


def classify_hardness(component1: int, component2: int, others: int) -> str:
    """Spider's hardness rule applied to the three component counts."""
    c1, c2, ot = component1, component2, others
    if c1 <= 1 and ot == 0 and c2 == 0:
        return "easy"
    if (ot <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and ot < 2 and c2 == 0):
        return "medium"
    if (
        (ot > 2 and c1 <= 2 and c2 == 0)
        or (2 < c1 <= 3 and ot <= 2 and c2 == 0)
        or (c1 <= 1 and ot == 0 and c2 <= 1)
    ):
        return "hard"
    return "extra"


# -- from Spider's parsed ``sql`` dictionary -------------------------------------------------

_WHERE_LIKE = 9  # index of 'like' in Spider's WHERE_OPS


def _dict_has_agg(unit: Any) -> bool:
    # Spider tests ``unit[0] != 0``; for a condition that is the NOT flag, for 'and'/'or' a letter.
    return unit[0] != 0


def hardness_counts_from_spider_sql(sql: dict[str, Any]) -> HardnessCounts:
    """The component counts of a query in Spider's parsed ``sql`` dictionary format."""
    from_conds = sql["from"]["conds"]
    where, having = sql["where"], sql["having"]
    group_by, order_by = sql["groupBy"], sql["orderBy"]

    c1 = bool(where) + bool(group_by) + bool(order_by) + (sql["limit"] is not None)
    if sql["from"]["table_units"]:
        c1 += len(sql["from"]["table_units"]) - 1
    conjunctions = from_conds[1::2] + where[1::2] + having[1::2]
    c1 += sum(1 for tok in conjunctions if tok == "or")
    cond_units = from_conds[::2] + where[::2] + having[::2]
    c1 += sum(1 for cu in cond_units if cu[1] == _WHERE_LIKE)

    c2 = 0
    for cu in cond_units:
        c2 += isinstance(cu[3], dict) + isinstance(cu[4], dict)
    c2 += sum(1 for key in ("intersect", "except", "union") if sql[key] is not None)

    aggs = sum(1 for u in sql["select"][1] if _dict_has_agg(u))
    aggs += sum(1 for u in where[::2] if _dict_has_agg(u))
    aggs += sum(1 for u in group_by if _dict_has_agg(u))
    if order_by:
        units = [vu[1] for vu in order_by[1] if vu[1]] + [vu[2] for vu in order_by[1] if vu[2]]
        aggs += sum(1 for u in units if _dict_has_agg(u))
    aggs += sum(1 for u in having if _dict_has_agg(u))
    others = (aggs > 1) + (len(sql["select"][1]) > 1) + (len(where) > 1) + (len(group_by) > 1)
    return HardnessCounts(component1=int(c1), component2=int(c2), others=int(others))


def hardness_from_spider_sql(sql: dict[str, Any]) -> str:
    """Spider hardness of a query in Spider's parsed ``sql`` dictionary format (as in dev.json)."""
    return hardness_counts_from_spider_sql(sql).hardness
