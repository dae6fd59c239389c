"""Which providers a model name may start with, checked from the name alone.

A model is named ``provider:model``; the providers are sqlchorus's own (``openai-compatible``,
``local``, ``python``) and those LangChain's ``init_chat_model`` builds. Checking a name here
imports nothing, so the command line refuses a mistyped provider at once rather than after the
graph and LangChain's models have been imported (seconds on a small machine).

>>> check_model_name("openai:gpt-4o-mini")
('openai', 'gpt-4o-mini')
>>> check_model_name("ollama:qwen2.5-coder:7b")
('ollama', 'qwen2.5-coder:7b')
"""

from __future__ import annotations

import difflib
import importlib.util

from sqlchorus.config.errors import ModelConfigError, split_model_name

__all__ = [
    "LANGCHAIN_PROVIDERS", "SQLCHORUS_PROVIDERS", "check_model_form", "check_model_name", "known_provider",
]

SQLCHORUS_PROVIDERS = ("openai-compatible", "local", "python")
"""Providers sqlchorus resolves itself (:func:`sqlchorus.core.models.resolve_model`), spelled exactly."""

LANGCHAIN_PROVIDERS = (
    "anthropic", "anthropic_bedrock", "azure_ai", "azure_openai", "baseten", "bedrock", "bedrock_converse",
    "bedrock_mantle_anthropic", "bedrock_mantle_openai", "cohere", "deepseek", "fireworks",
    "google_anthropic_vertex", "google_genai", "google_vertexai", "groq", "huggingface", "ibm", "langsmith",
    "litellm", "meta", "mistralai", "nvidia", "ollama", "openai", "openrouter", "perplexity", "together",
    "upstage", "xai",
)
"""The providers of LangChain's ``init_chat_model`` (its ``_BUILTIN_PROVIDERS``, which a test
keeps equal to the installed LangChain's), as it normalises them: lower case, ``_`` for ``-``."""


def _langchain_form(provider: str) -> str:
    # init_chat_model reads "Azure-OpenAI" as azure_openai.
    return provider.replace("-", "_").lower()


def known_provider(provider: str) -> bool:
    """Whether ``provider`` can build a model: one of sqlchorus's own, one of LangChain's, or a
    provider of a newer LangChain than this list knows, whose ``langchain_<provider>`` package
    is installed (looked for, not imported)."""
    if provider in SQLCHORUS_PROVIDERS:
        return True
    normal = _langchain_form(provider)
    if normal in LANGCHAIN_PROVIDERS:
        return True
    if not normal.isidentifier():
        return False
    try:
        return importlib.util.find_spec(f"langchain_{normal}") is not None
    except (ImportError, ValueError):
        return False


def check_model_form(provider: str, name: str) -> None:
    """Refuse a model of sqlchorus's own providers whose name lacks a part that provider needs:
    ``python:package.module:factory``, ``openai-compatible:<model>@<base_url>``.

    >>> check_model_form("openai-compatible", "qwen2.5-coder")
    Traceback (most recent call last):
    ...
    sqlchorus.config.errors.ModelConfigError: An OpenAI-compatible model is named 'openai-compatible:<model>@<base_url>', for example openai-compatible:qwen2.5-coder@http://127.0.0.1:8000/v1.
    """
    if provider == "python":
        module_name, colon, attribute = name.rpartition(":")
        if not colon or not module_name or not attribute:
            raise ModelConfigError(
                f"A model from Python code is named 'python:package.module:factory', not 'python:{name}'.")
    elif provider == "openai-compatible":
        model, at, base_url = name.rpartition("@")
        if not at or not model or not base_url:
            raise ModelConfigError(
                "An OpenAI-compatible model is named 'openai-compatible:<model>@<base_url>', "
                "for example openai-compatible:qwen2.5-coder@http://127.0.0.1:8000/v1.")


def check_model_name(spec: str) -> tuple[str, str]:
    """``spec`` split into provider and model, once both are known to be usable as names.

    Raises:
        ModelConfigError: the name is not ``provider:model``, names a provider that is neither
            sqlchorus's nor LangChain's (the message gives the closest one), or lacks a part
            its provider needs (:func:`check_model_form`).
    """
    provider, name = split_model_name(spec)
    if known_provider(provider):
        check_model_form(provider, name)
        return provider, name
    everyone = [*SQLCHORUS_PROVIDERS, *LANGCHAIN_PROVIDERS]
    closest = difflib.get_close_matches(_langchain_form(provider), everyone, n=1, cutoff=0.6)
    hint = f" Did you mean {closest[0]}:{name}?" if closest else ""
    raise ModelConfigError(
        f"Model {spec.strip()!r} names an unknown provider {provider!r}.{hint} A model is named provider:model, "
        f"the provider one of {', '.join(SQLCHORUS_PROVIDERS)} or LangChain's {', '.join(LANGCHAIN_PROVIDERS)}.")
