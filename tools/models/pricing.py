"""What model calls cost: a price table per model, extendable from a file.

Prices are US dollars per million tokens, input and output. The built-in table holds list
prices of a few common hosted models and is a starting point only: providers change prices, so
a user's file (JSON or TOML) is read on top of it and wins::

    # prices.toml
    [models."gpt-4o-mini"]
    input = 0.15
    output = 0.60

    {"models": {"my-finetune": {"input": 1.0, "output": 2.0}}}

A model is looked up by its exact name, then without a ``provider:`` prefix, then by the
longest known name it starts with (so a dated snapshot such as ``gpt-4o-mini-2024-07-18`` takes
the price of ``gpt-4o-mini``). A call to a model with no price is *unpriced*: it adds nothing to
``cost_usd`` and is counted and named (``unpriced_calls``, ``unpriced_models``), and every place
that shows a cost says ``unpriced`` for it (:func:`cost_text`) rather than a guessed ``$0``.
Local models (``local:...``) cost 0. Calls answered from the response cache cost 0 and keep the
tokens of the call they replay, marked ``cached``.

:func:`usage_cost` adds up what a run's model calls cost, in total and per node, from their usage
records (in memory, or read back from a trace).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlchorus.tools.errors import SqlchorusError


@dataclass(frozen=True)
class Price:
    """US dollars per million input and output tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


# List prices (USD per 1M tokens, standard tier) as published by the providers in 2025.
BUILTIN_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "claude-opus-4-1": Price(15.00, 75.00),
    "claude-sonnet-4-5": Price(3.00, 15.00),
    "claude-sonnet-4-0": Price(3.00, 15.00),
    "claude-3-7-sonnet": Price(3.00, 15.00),
    "claude-haiku-4-5": Price(1.00, 5.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
}


class PriceFileError(SqlchorusError, ValueError):
    """A prices file that cannot be read, with what is wrong in it."""

    kind = "price_file"


class PriceTable:
    """Prices per model name.

    Args:
        prices: extra or overriding prices, ``{name: Price | {"input": x, "output": y}}``.
        path: a JSON or TOML file with a ``models`` table of such entries, read on top.
        builtin: start from :data:`BUILTIN_PRICES` (True) or from nothing.
    """

    def __init__(
        self,
        prices: Mapping[str, Any] | None = None,
        *,
        path: str | Path | None = None,
        builtin: bool = True,
    ):
        self.prices: dict[str, Price] = dict(BUILTIN_PRICES) if builtin else {}
        for name, value in (prices or {}).items():
            self.prices[name] = _price(name, value)
        if path:
            self.prices.update(load_prices(path))

    def price_for(self, model: str) -> Price | None:
        """The price of ``model``, or None when it has none (and is not local)."""
        if not model:
            return None
        if model.startswith("local:"):
            return Price(0.0, 0.0)
        for name in (model, model.partition(":")[2] if ":" in model else None):
            if name and name in self.prices:
                return self.prices[name]
        bare = model.partition(":")[2] if ":" in model else model
        best = max((n for n in self.prices if bare.startswith(n)), key=len, default=None)
        return self.prices[best] if best else None

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """Dollars for one call, or None when the model has no price."""
        price = self.price_for(model)
        return None if price is None else price.cost(input_tokens, output_tokens)


def load_prices(path: str | Path) -> dict[str, Price]:
    """Read a prices file (``.json`` or ``.toml``) with a ``models`` table.

    Raises:
        PriceFileError: the file is missing, does not parse, or holds a bad entry.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PriceFileError(f"Cannot read prices file {path}: {e.strerror or e}") from e
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise PriceFileError(f"Prices file {path} does not parse: {e}") from e
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise PriceFileError(
            f"Prices file {path} needs a 'models' table of {{name: {{input, output}}}} "
            "in US dollars per million tokens."
        )
    return {name: _price(name, value, path) for name, value in models.items()}


def _price(name: str, value: Any, path: Path | None = None) -> Price:
    if isinstance(value, Price):
        return value
    where = f" in {path}" if path else ""
    if not isinstance(value, dict) or not {"input", "output"} <= set(value):
        raise PriceFileError(f"The price of {name!r}{where} needs 'input' and 'output' (USD per 1M tokens).")
    try:
        price = Price(float(value["input"]), float(value["output"]))
    except (TypeError, ValueError) as e:
        raise PriceFileError(f"The price of {name!r}{where} is not a number: {e}") from e
    if price.input < 0 or price.output < 0:
        raise PriceFileError(f"The price of {name!r}{where} is negative.")
    return price


def usage_cost(usage: Iterable[Mapping[str, Any]], seconds: float = 0.0) -> dict[str, Any]:
    """Model calls, tokens, dollars and seconds of a run's usage records, in total and per node.

    ``cost_usd`` adds up the price of each priced call; ``unpriced_calls`` counts the calls of
    models that have no price (named in ``unpriced_models``), which ``cost_usd`` leaves out, so
    a cost with unpriced calls is shown as such (:func:`cost_text`), never as ``$0``. Calls
    answered from the response cache count in ``cached_calls``, cost nothing, and keep the
    tokens of the call they replay: ``input_tokens`` and ``output_tokens`` include them, and
    ``cached_input_tokens`` / ``cached_output_tokens`` say how many of them were cached.
    ``seconds`` is the run's wall time, given by the caller.
    """
    usage = list(usage)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for u in usage:
        by_node.setdefault(u["node"], []).append(u)
    total = _usage_sums(usage)
    return {
        "calls": total["calls"],
        "cached_calls": total["cached_calls"],
        "replayed_calls": sum(1 for u in usage if u.get("replayed")),
        "input_tokens": total["input_tokens"],
        "output_tokens": total["output_tokens"],
        "cached_input_tokens": total["cached_input_tokens"],
        "cached_output_tokens": total["cached_output_tokens"],
        "cost_usd": total["cost_usd"],
        "unpriced_calls": total["unpriced_calls"],
        "unpriced_models": sorted({u["model"] for u in usage if u.get("priced") is False}),
        "model_seconds": total["model_seconds"],
        "seconds": round(seconds, 4),
        "by_node": {node: _usage_sums(calls) for node, calls in by_node.items()},
    }


def _usage_sums(usage: list[Mapping[str, Any]]) -> dict[str, Any]:
    cached = [u for u in usage if u.get("cached")]
    return {
        "calls": len(usage),
        "cached_calls": len(cached),
        "input_tokens": sum(u["input_tokens"] for u in usage),
        "output_tokens": sum(u["output_tokens"] for u in usage),
        "cached_input_tokens": sum(u["input_tokens"] for u in cached),
        "cached_output_tokens": sum(u["output_tokens"] for u in cached),
        "cost_usd": round(sum(float(u.get("cost_usd") or 0.0) for u in usage), 10),
        "unpriced_calls": sum(1 for u in usage if u.get("priced") is False),
        "model_seconds": round(sum(u["latency_ms"] for u in usage) / 1000.0, 4),
    }


UNPRICED = "unpriced"
"""What a cost reads where some of its calls have no price."""


def cost_text(cost_usd: float | None, unpriced: bool | int = False, *, digits: int = 6) -> str:
    """A cost as every command and page shows it: ``$0.001234``; ``unpriced`` when the calls it
    counts had no price; ``$0.001234 + unpriced`` when only some of them had one (the dollars are
    the priced calls'). ``unpriced``: whether (or how many) calls had no price."""
    dollars = float(cost_usd or 0.0)
    if unpriced and not dollars:
        return UNPRICED
    text = f"${dollars:.{digits}f}"
    return f"{text} + {UNPRICED}" if unpriced else text
