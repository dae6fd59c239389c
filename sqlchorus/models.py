"""Turning a model name into a chat model, one per role.

A model is named ``provider:model`` (anything ``langchain``'s ``init_chat_model`` knows:
``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, ``ollama:qwen2.5-coder:7b``, ...),
``openai-compatible:<model>@<base_url>`` for any server that speaks the OpenAI API (vLLM,
llama.cpp server, LM Studio), or given directly as a langchain-core ``BaseChatModel``.
Provider keys come from the provider's usual environment variables.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from sqlchorus.settings import ROLES, Settings

NO_MODEL_HELP = """No model is configured. Name one of:
  --model openai:gpt-4o-mini                       (needs OPENAI_API_KEY; pip install 'sqlchorus[openai]')
  --model anthropic:claude-sonnet-4-5              (needs ANTHROPIC_API_KEY; pip install 'sqlchorus[anthropic]')
  --model ollama:qwen2.5-coder:7b                  (a local Ollama server; pip install 'sqlchorus[ollama]')
  --model openai-compatible:MODEL@http://HOST:PORT/v1  (vLLM, llama.cpp server, LM Studio)
or set SQLCHORUS_MODEL to one of these names."""

_EXTRA_FOR_PROVIDER = {
    "openai": "openai",
    "openai-compatible": "openai",
    "azure_openai": "openai",
    "anthropic": "anthropic",
    "ollama": "ollama",
}


class ModelConfigError(ValueError):
    """A model name that cannot be turned into a chat model, with what to do about it."""


def model_name(model: Any) -> str:
    """A short, stable name for a model spec or instance, for usage records and traces."""
    if model is None:
        return "none"
    if isinstance(model, str):
        return model
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def resolve_model(spec: Any, *, temperature: float = 0.0, max_tokens: int | None = None) -> BaseChatModel:
    """Return a chat model for ``spec``.

    Raises:
        ModelConfigError: the name is malformed, the provider is unknown, or its package is
            missing (the message names the extra to install).
    """
    if isinstance(spec, BaseChatModel):
        return spec
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        raise ModelConfigError(NO_MODEL_HELP)
    if not isinstance(spec, str):
        raise ModelConfigError(
            f"A model must be a 'provider:model' name or a BaseChatModel, not {type(spec).__name__}."
        )
    spec = spec.strip()
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise ModelConfigError(
            f"Model {spec!r} is not of the form 'provider:model' (for example openai:gpt-4o-mini)."
        )
    kwargs: dict[str, Any] = {"temperature": temperature}
    if max_tokens:
        kwargs["max_tokens"] = max_tokens
    if provider == "openai-compatible":
        return _openai_compatible(name, kwargs)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as e:  # pragma: no cover - langchain is a dependency
        raise ModelConfigError(f"langchain is not installed: {e}") from e
    try:
        return init_chat_model(name, model_provider=provider, **kwargs)
    except (ImportError, AttributeError) as e:
        extra = _EXTRA_FOR_PROVIDER.get(provider)
        hint = (
            f"pip install 'sqlchorus[{extra}]'"
            if extra
            else f"install the langchain integration package for {provider!r}"
        )
        raise ModelConfigError(
            f"The {provider!r} provider's package is not installed: {hint}."
        ) from e
    except ValueError as e:
        raise ModelConfigError(f"Cannot use model {spec!r}: {e}") from e


def _openai_compatible(name: str, kwargs: dict[str, Any]) -> BaseChatModel:
    model, at, base_url = name.rpartition("@")
    if not at or not model or not base_url:
        raise ModelConfigError(
            "An OpenAI-compatible model is named 'openai-compatible:<model>@<base_url>', "
            "for example openai-compatible:qwen2.5-coder@http://127.0.0.1:8000/v1."
        )
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as e:
        raise ModelConfigError(
            "The OpenAI-compatible provider needs langchain-openai: pip install 'sqlchorus[openai]'."
        ) from e
    api_key = os.environ.get("OPENAI_COMPATIBLE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
    return ChatOpenAI(model=model, base_url=base_url, api_key=api_key, **kwargs)


def resolve_roles(settings: Settings) -> dict[str, BaseChatModel]:
    """One chat model per role, sharing instances where roles name the same model."""
    resolved: dict[int | str, BaseChatModel] = {}
    roles: dict[str, BaseChatModel] = {}
    for role in ROLES:
        spec = settings.model_for(role)
        key: int | str = spec if isinstance(spec, str) else id(spec)
        if key not in resolved:
            resolved[key] = resolve_model(
                spec, temperature=settings.temperature, max_tokens=settings.max_tokens
            )
        roles[role] = resolved[key]
    return roles
