"""The passages two texts share: the spans of each normalized text covered by shingles that
the other text has too (what `simindex explain` marks). Shingles compare as strings here,
not as hashes, so the spans are exact."""

from __future__ import annotations

from collections.abc import Iterable

Span = tuple[int, int]  # [start, end) in characters of the normalized text


def shared_passages(a: str, b: str, shingle: str, k: int) -> tuple[list[Span], list[Span]]:
    """Spans of the normalized texts ``a`` and ``b`` (see shingle.normalize) covered by their
    common shingles (``shingle``: "char", k code points; "word", k words; a text shorter
    than one shingle is one shingle), merged and in order, for ``a`` and for ``b``."""
    shingles_a, shingles_b = _shingles(a, shingle, k), _shingles(b, shingle, k)
    common = {s for s, _ in shingles_a} & {s for s, _ in shingles_b}
    return _merged(span for s, span in shingles_a if s in common), _merged(
        span for s, span in shingles_b if s in common
    )


def _shingles(text: str, shingle: str, k: int) -> list[tuple[str, Span]]:
    """Each shingle of ``text`` with the span it covers."""
    if shingle == "char":
        if len(text) <= k:
            return [(text, (0, len(text)))] if text else []
        return [(text[i : i + k], (i, i + k)) for i in range(len(text) - k + 1)]
    starts, position = [], 0
    for word in text.split(" "):
        starts.append((position, position + len(word)))
        position += len(word) + 1
    count = max(len(starts) - k + 1, 1) if text else 0
    return [
        (
            " ".join(text[s:e] for s, e in starts[i : i + k]),
            (starts[i][0], starts[i : i + k][-1][1]),
        )
        for i in range(count)
    ]


def _merged(spans: Iterable[Span]) -> list[Span]:
    """Overlapping or touching spans joined, in order."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]
