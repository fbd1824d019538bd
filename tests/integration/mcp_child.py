"""Helpers the MCP memory server tests hand to a server subprocess: a
deterministic embedding function (`--embed tests.integration.mcp_child:embed`)."""

from __future__ import annotations

import math


def embed(text: str) -> list[float]:
    """A deterministic 26-letter bag-of-letters embedding (unit length)."""
    counts = [0.0] * 26
    for ch in text.lower():
        if "a" <= ch <= "z":
            counts[ord(ch) - ord("a")] += 1.0
    norm = math.sqrt(sum(c * c for c in counts)) or 1.0
    return [c / norm for c in counts] if any(counts) else [1.0] + [0.0] * 25
