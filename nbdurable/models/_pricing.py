"""Prices per million tokens, so that ``Usage.cost`` (and cost budget stops) work.

The table holds list prices in US dollars as published by the providers when
this version was written; they change, so check yours and extend or override
the table::

    import nbdurable as nd

    nd.models.set_price("my-finetune", input=1.0, output=4.0)
    nd.models.price_for("gpt-4o-2024-08-06")   # the longest matching prefix: "gpt-4o"

An adapter looks its model up once; a model with no price gets ``cost=None``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Usage

__all__ = ["PRICES", "Price", "cost_of", "price_for", "set_price"]


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens.

    Attributes:
        input: Per million input tokens not read from a cache.
        output: Per million output tokens.
        cached_input: Per million input tokens read from the provider's prompt
            cache (None: priced as ``input``).
        cache_write: Per million input tokens written to the provider's prompt
            cache (Anthropic bills them above ``input``; None: priced as ``input``).
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


PRICES: dict[str, Price] = {
    # OpenAI
    "gpt-5": Price(1.25, 10.0, 0.125),
    "gpt-5-mini": Price(0.25, 2.0, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.0, 8.0, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.0, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "o3": Price(2.0, 8.0, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
    # Anthropic (cached_input: cache reads, 0.1x input; cache_write: 5-minute cache
    # writes, 1.25x input)
    "claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": Price(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4": Price(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-5": Price(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
}
"""Model name (or name prefix) -> price. Edit it, or use :func:`set_price`."""


def set_price(
    model: str,
    *,
    input: float,
    output: float,
    cached_input: float | None = None,
    cache_write: float | None = None,
) -> Price:
    """Add or replace the price of ``model`` (a full name or a name prefix)."""
    price = Price(input, output, cached_input, cache_write)
    PRICES[model] = price
    return price


def price_for(model: str) -> Price | None:
    """The price of ``model``: an exact entry, else the longest entry its name starts with.

    Dated snapshots (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) and
    provider-prefixed names (``openai/gpt-4o``) find their family's price.
    """
    name = model.rsplit("/", 1)[-1]
    if name in PRICES:
        return PRICES[name]
    matches = [key for key in PRICES if name.startswith(key + "-") or name.startswith(key + ".")]
    return PRICES[max(matches, key=len)] if matches else None


def cost_of(usage: Usage, price: Price | None, *, cache_write_tokens: int = 0) -> float | None:
    """The cost of ``usage`` in US dollars (None without a price).

    ``usage.input_tokens`` counts every input token, ``cached_input_tokens``
    the part of them read from a cache and ``cache_write_tokens`` (reported by
    Anthropic, not kept in :class:`~nbdurable.Usage`) the part written to it.
    """
    if price is None:
        return None
    cached = usage.cached_input_tokens or 0
    written = min(cache_write_tokens, max(0, usage.input_tokens - cached))
    fresh = max(0, usage.input_tokens - cached - written)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.input if price.cache_write is None else price.cache_write
    total = (
        fresh * price.input
        + cached * cached_rate
        + written * write_rate
        + usage.output_tokens * price.output
    )
    return total / 1_000_000
