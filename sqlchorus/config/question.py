"""A question and its hint as a run takes them, checked before anything is built.

Kept apart from the runs so that the command line refuses an empty or over-long question at
once, without importing the graph. An entry point that checks a question before the run is
prepared (the command line, ``ask``, a server) hands the run what :func:`checked_question` gave;
the run sees it is checked (:func:`is_checked`) and does not check it again.
"""

from __future__ import annotations

import re

from sqlchorus.config.errors import EmptyQuestionError, QuestionTooLongError

__all__ = ["CheckedText", "checked_question", "is_checked"]

_LONE_SURROGATES = re.compile("[\ud800-\udc7f\udd00-\udfff]")
"""Surrogates that stand for no byte (a JSON string may hold them as ``\\ud800``)."""


def _valid_text(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 (a shell passes them on as lone
    surrogates) and lone surrogates from elsewhere (a JSON ``"\\ud800"``) become U+FFFD, so every
    span, prompt and file can carry the question."""
    text = _LONE_SURROGATES.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class CheckedText(str):
    """A question or hint as :func:`checked_question` gave it, checked against ``limit`` characters."""

    limit: int

    def __new__(cls, text: str, limit: int) -> CheckedText:
        made = super().__new__(cls, text)
        made.limit = limit
        return made

    def __reduce__(self) -> tuple[type[CheckedText], tuple[str, int]]:
        return CheckedText, (str(self), self.limit)


def is_checked(question: object, evidence: object, limit: int) -> bool:
    """Whether :func:`checked_question` gave ``question`` and ``evidence`` for a limit of at most
    ``limit``: what passed a lower limit passes this one, so the run takes them as they are."""
    return (isinstance(question, CheckedText) and isinstance(evidence, CheckedText)
            and max(question.limit, evidence.limit) <= limit)


def checked_question(question: str, evidence: str, limit: int) -> tuple[CheckedText, CheckedText]:
    """The question and hint as a run takes them: valid Unicode, neither over ``limit``; each a
    :class:`CheckedText`, which a run given them does not check again (:func:`is_checked`).

    Raises:
        EmptyQuestionError: the question is empty or white space.
        QuestionTooLongError: the question or hint is over ``limit`` characters.
    """
    if question is None or not isinstance(question, str) or not question.strip():
        if question is not None and not isinstance(question, str):
            raise EmptyQuestionError(f"The question must be text, not {type(question).__name__}.")
        raise EmptyQuestionError("The question is empty: ask something about the database.")
    if evidence is not None and not isinstance(evidence, str):
        raise EmptyQuestionError(f"The hint must be text, not {type(evidence).__name__}.")
    question, evidence = _valid_text(question), _valid_text(evidence or "")
    for name, text in (("question", question), ("hint", evidence)):
        if len(text) > limit:
            raise QuestionTooLongError(
                f"The {name} has {len(text):,} characters; the limit is {limit:,} (--max-question-chars). "
                "Put long background in the database's descriptions, or raise the limit."
            )
    return CheckedText(question, limit), CheckedText(evidence, limit)
