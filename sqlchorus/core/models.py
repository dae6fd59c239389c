"""Turning a model name into a chat model, one per role.

A model is named ``provider:model`` (anything ``langchain``'s ``init_chat_model`` knows:
``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, ``ollama:qwen2.5-coder:7b``, ...),
``openai-compatible:<model>@<base_url>`` for any server that speaks the OpenAI API (vLLM,
llama.cpp server, LM Studio), ``local:<path.gguf>`` or ``local:smollm2`` for a GGUF model run
in-process (:mod:`sqlchorus.core.local_model`), or given directly as a langchain-core
``BaseChatModel``. Provider keys come from the provider's usual environment variables
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``; ``OPENAI_COMPATIBLE_API_KEY`` for a compatible
server, which may need none).

Models built from a name get the run's resilience settings: hosted providers take the time limit
as their SDK's ``timeout`` and no retries of their SDK's own, since an SDK's retries would each
get the whole limit again; :func:`sqlchorus.core.llm.call_model` bounds every attempt by the
limit and retries transient failures itself. Every named model takes the entry point's
``InMemoryRateLimiter`` when a rate limit is set. Only models built from a name are cached
(:mod:`sqlchorus.tools.models.cache`): a model object passed in may be scripted or stateful, and is the
caller's to cache.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from langchain_core.language_models import BaseChatModel

from sqlchorus.config.errors import NO_MODEL_HELP, ModelConfigError, split_model_name
from sqlchorus.config.model_names import check_model_form
from sqlchorus.config.install import install_hint
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.local_model import LocalModelError, local_chat_model
from sqlchorus.tools.models.cache import made_from

_EXTRA_FOR_PROVIDER = {
    "openai": "openai",
    "openai-compatible": "openai",
    "azure_openai": "openai",
    "anthropic": "anthropic",
    "ollama": "ollama",
    "local": "local",
}

# Providers whose chat model class takes ``timeout`` and ``max_retries``.
_SDK_RETRIES = {"openai", "azure_openai", "anthropic", "openai-compatible"}


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


_PROVIDER_CLASSES = {
    "AzureChatOpenAI": "azure.ai.openai", "ChatOpenAI": "openai", "ChatAnthropic": "anthropic",
    "ChatOllama": "ollama", "ChatBedrock": "aws.bedrock", "ChatBedrockConverse": "aws.bedrock",
    "ChatGoogleGenerativeAI": "gcp.gemini", "ChatVertexAI": "gcp.vertex_ai", "ChatMistralAI": "mistral_ai",
    "ChatGroq": "groq", "ChatDeepSeek": "deepseek", "ChatCohere": "cohere", "ChatXAI": "x_ai",
    "ChatPerplexity": "perplexity",
}
"""LangChain's provider chat models, by class, and the GenAI conventions' name of their provider."""

_PROVIDER_TYPES = {"openai-chat": "openai", "azure-openai-chat": "azure.ai.openai", "anthropic-chat": "anthropic",
                   "chat-ollama": "ollama", "ollama": "ollama"}
"""LangChain's ``_llm_type`` of a few provider models, as the GenAI conventions name the provider."""


def provider_name(spec: Any, model: Any) -> str:
    """The provider of a model, for ``gen_ai.provider.name``: the ``provider`` of a
    ``provider:model`` spec; for a model made by code (``python:package.module:factory``) or
    passed in, the model's own: its LangChain class's provider (``ChatOpenAI``: ``openai``),
    else its ``_llm_type``, else the factory's name (never the literal ``python``)."""
    if isinstance(spec, str) and ":" in spec and not spec.strip().startswith("python:"):
        return spec.split(":", 1)[0]
    for cls in type(model).__mro__:
        if cls.__name__ in _PROVIDER_CLASSES:
            return _PROVIDER_CLASSES[cls.__name__]
    kind = getattr(model, "_llm_type", None)
    if isinstance(kind, str) and kind.strip() and kind.strip() != "python":
        return _PROVIDER_TYPES.get(kind.strip(), kind.strip())
    if isinstance(spec, str) and spec.strip().startswith("python:"):
        return spec.strip().rsplit(":", 1)[-1].rsplit(".", 1)[-1] or type(model).__name__
    return type(model).__name__


def resolve_model(
    spec: Any,
    *,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    timeout_s: float | None = None,
    max_retries: int | None = None,
    rate_limiter: Any = None,
) -> BaseChatModel:
    """Return a chat model for ``spec``.

    Args:
        spec: a ``provider:model`` name or a ``BaseChatModel`` (returned as it is).
            ``python:package.module:factory`` calls ``factory()`` of that module, which returns a
            ``BaseChatModel``: in-house wrappers and scripted models, by name.
        temperature, max_tokens: sampling settings for a named model.
        timeout_s, max_retries: per-call timeout and retries, for providers whose SDK has them.
        rate_limiter: a langchain-core rate limiter for a named model.

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
    provider, name = split_model_name(spec)
    if provider == "python":
        return _from_python(name)
    if provider == "local":
        model = _local(name, max_tokens=max_tokens, temperature=temperature)
        if rate_limiter is not None:
            model.rate_limiter = rate_limiter
        return model
    kwargs: dict[str, Any] = {"temperature": temperature}
    if max_tokens:
        kwargs["max_tokens"] = max_tokens
    if rate_limiter is not None:
        kwargs["rate_limiter"] = rate_limiter
    if provider in _SDK_RETRIES:
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        if max_retries is not None:
            kwargs["max_retries"] = max_retries
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
            install_hint(extra)
            if extra
            else f"install the langchain integration package for {provider!r}"
        )
        raise ModelConfigError(
            f"The {provider!r} provider's package is not installed: {hint}."
        ) from e
    except Exception as e:  # provider SDKs raise their own types, e.g. for a missing API key
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelConfigError(f"Cannot use model {spec!r}: {first}") from e


def _from_python(name: str) -> BaseChatModel:
    """The model made by ``package.module:factory``, a callable of no arguments."""
    check_model_form("python", name)
    module_name, _, attribute = name.rpartition(":")
    # As `python -m` would: a module in the current folder can be named (after every other place,
    # so it shadows nothing installed).
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelConfigError(f"Cannot import {module_name!r} for model 'python:{name}': {e}") from e
    except Exception as e:  # the user's own module fails as it loads (a syntax error, say): one line
        raise ModelConfigError(f"Cannot import {module_name!r} for model 'python:{name}': "
                               f"{type(e).__name__}: {e}") from e
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ModelConfigError(f"{module_name!r} has no callable {attribute!r} for model 'python:{name}'.")
    try:
        model = factory()
    except Exception as e:  # the user's own code: say where it failed, not a traceback
        raise ModelConfigError(f"{module_name}.{attribute}() failed: {type(e).__name__}: {e}") from e
    if not isinstance(model, BaseChatModel):
        raise ModelConfigError(
            f"{module_name}.{attribute}() returned {type(model).__name__}, not a LangChain BaseChatModel."
        )
    made_from(model, f"python:{name}")
    return model


def _local(name: str, *, max_tokens: int | None, temperature: float) -> BaseChatModel:
    try:
        return local_chat_model(name, max_tokens=max_tokens, temperature=temperature)
    except LocalModelError as e:
        raise ModelConfigError(str(e)) from e


def rate_limiter(requests_per_second: float) -> Any:
    """A rate limiter for ``requests_per_second``. Build one per entry point and hand it to
    :func:`resolve_roles`, so that the questions it answers in parallel share the budget."""
    from langchain_core.rate_limiters import InMemoryRateLimiter

    return InMemoryRateLimiter(
        requests_per_second=requests_per_second, check_every_n_seconds=0.05, max_bucket_size=1
    )


def _openai_compatible(name: str, kwargs: dict[str, Any]) -> BaseChatModel:
    check_model_form("openai-compatible", name)
    model, _, base_url = name.rpartition("@")
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as e:
        raise ModelConfigError(
            f"The OpenAI-compatible provider needs langchain-openai: {install_hint('openai')}."
        ) from e
    api_key = os.environ.get("OPENAI_COMPATIBLE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
    if kwargs.get("max_tokens"):
        # ChatOpenAI sends the cap as ``max_completion_tokens``, which some compatible servers
        # (llama.cpp's Python server among them) ignore; ``max_tokens`` is understood by all.
        kwargs["extra_body"] = {"max_tokens": kwargs["max_tokens"]}
    return ChatOpenAI(model=model, base_url=base_url, api_key=api_key, **kwargs)


def resolve_roles(
    settings: Settings, *, limiter: Any = None, roles: tuple[str, ...] = ROLES
) -> dict[str, BaseChatModel]:
    """One chat model per role of ``roles`` (every role by default), sharing instances where
    roles name the same model.

    Named models share ``limiter`` (a new one when ``settings.rate_limit`` is set and none is
    given).

    Raises:
        ModelConfigError: a model name cannot be used.
    """
    if limiter is None and settings.rate_limit:
        limiter = rate_limiter(settings.rate_limit)
    resolved: dict[int | str, BaseChatModel] = {}
    by_role: dict[str, BaseChatModel] = {}
    for role in roles:
        spec = settings.model_for(role)
        key: int | str = spec if isinstance(spec, str) else id(spec)
        if key not in resolved:
            resolved[key] = resolve_model(
                spec, temperature=settings.temperature, max_tokens=settings.max_tokens,
                timeout_s=settings.model_timeout_s, max_retries=0,
                rate_limiter=limiter,
            )
        by_role[role] = resolved[key]
    return by_role
