"""The embedding ``tests/test_server.py`` names in ``langgraph.json``'s store index.

``"index": {"embed": "./embed.py:embed", ...}``: the server loads it by file path.
It stands for an embedding model: one dimension per word of ``WORDS``, counting
how often the word occurs, so the scores a search returns are known in advance.
"""

from __future__ import annotations

WORDS = ("tea", "coffee", "cake")


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(text.count(word)) for word in WORDS] for text in texts]
