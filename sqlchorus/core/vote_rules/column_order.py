"""``column_order``: results with the same rows in another order of columns are one answer.

``SELECT name, id`` and ``SELECT id, name`` answer the same question; counted apart, they split
one answer's votes (Spider's and BIRD's scorers count them as the same answer too).
"""

from __future__ import annotations

NAME = "column_order"
WHY = "the same rows with their columns in another order are the same answer"


def apply(ballot) -> None:
    voting = [ballot.candidates[k] for k in ballot.voters if ballot.candidates[k].get("status") != "error"]
    if any(c.get("answer_key") is None for c in voting):
        return  # records checked without the evidence (made by hand, say): fingerprints decide
    prints: dict[str, set] = {}
    for c in voting:
        prints.setdefault(c["answer_key"], set()).add(c.get("fingerprint"))
    ballot.key = "answer_key"
    joined = sum(1 for p in prints.values() if len(p) > 1)
    if joined:
        ballot.notes.append(f"{joined} answer(s) given in more than one column order counted as one (column_order)")
