"""Errors a user of sqlchorus can meet, each with a message meant for a person."""

from __future__ import annotations


class SqlchorusError(Exception):
    """Base of the errors sqlchorus raises for bad input or configuration."""


class EmptyQuestionError(SqlchorusError):
    """The question is empty or only white space."""


class QuestionTooLongError(SqlchorusError):
    """The question, or its hint, is longer than ``Settings.max_question_chars``."""


class RunCancelledError(SqlchorusError):
    """The run was cancelled (by its caller, or a client that went away) before it ended."""


class ServiceError(SqlchorusError):
    """A request a server cannot take: ``kind`` names it, ``status`` is its HTTP status."""

    kind = "invalid_request"
    status = 400


class UnknownDatabaseError(ServiceError):
    kind = "unknown_database"
    status = 404


class UnknownRunIdError(ServiceError):
    kind = "unknown_run"
    status = 404


class RunFinishedError(ServiceError):
    kind = "run_finished"
    status = 409


class NoCheckpointsError(ServiceError):
    kind = "no_checkpoints"
    status = 409
