"""Benchmark: the memory that one huge document takes to ingest, in bytes per character.

For each --sizes N and each kind of text, a JSON-lines file of one document of N characters
is ingested with ``simindex ingest`` (SQLite, default settings but ``--max-chars``) into a
fresh database, in a process of its own; its peak RSS less that of ingesting a document of
the same kind of BASELINE_CHARS characters (Python, simindex and its kernels loaded) is
divided by N. The kinds:

  ascii     Reuters-21578's ASCII words (benchmarks/corpus.py) drawn at random, joined by
            spaces: prose, whose shingles repeat
  cyrillic  the same with the Latin letters mapped to Cyrillic ones: Python holds it as two
            bytes a character, UTF-8 as two bytes a letter
  random    letters and digits drawn at random, a space in every 7 characters: few
            shingles repeat, the most memory a text of that length takes

Run from the repository root:
    python benchmarks/bench_bigdoc.py                      # 1M, 10M and 50M characters
    python benchmarks/bench_bigdoc.py --sizes 1000000 --kinds ascii
    python benchmarks/bench_bigdoc.py --results
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import resource
import string
import tempfile
from pathlib import Path

import corpus
import measure
import numpy as np

TITLE = "Big document: memory per character of one huge document (bench_bigdoc.py)"
SEED = 20240601
BASELINE_CHARS = 1_000
CYRILLIC = str.maketrans(
    string.ascii_lowercase + string.ascii_uppercase,
    "абвгдежзийклмнопрстуфхцчш" + "щ" + "АБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШ" + "Щ",
)
KINDS = ("ascii", "cyrillic", "random")
RANDOM_ALPHABET = np.frombuffer((string.ascii_lowercase + string.digits).encode(), np.uint8)


def reuters_words() -> list[str]:
    """Every ASCII word of the Reuters stories, in order, repeats included."""
    with gzip.open(corpus.REUTERS, "rt", encoding="utf-8") as f:
        return [w for line in f for w in json.loads(line)["text"].split() if w.isascii()]


def words_text(chars: int) -> str:
    """``chars`` characters of Reuters words drawn at random (seeded), joined by spaces."""
    words = reuters_words()
    rng = np.random.default_rng(SEED)
    mean = sum(map(len, words[:100_000])) / min(len(words), 100_000) + 1
    drawn = rng.integers(len(words), size=int(chars / mean * 1.1) + 10)
    text = " ".join(words[i] for i in drawn.tolist())[:chars]
    assert len(text) == chars, "too few words drawn"
    return text


def random_text(chars: int) -> str:
    """``chars`` letters and digits drawn at random (seeded), every 7th a space."""
    rng = np.random.default_rng(SEED)
    letters = RANDOM_ALPHABET[rng.integers(RANDOM_ALPHABET.size, size=chars)]
    letters[6::7] = ord(" ")
    return letters.tobytes().decode("ascii")


def text_of(chars: int, kind: str) -> str:
    if kind == "random":
        return random_text(chars)
    text = words_text(chars)
    return text.translate(CYRILLIC) if kind == "cyrillic" else text


def write_document(path: Path, chars: int, kind: str) -> None:
    """A JSON-lines file of one document of ``chars`` characters of ``kind``."""
    record = {"id": "big", "text": text_of(chars, kind)}
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")


def measured(chars: int, kind: str, folder: Path) -> float:
    """Peak RSS (MiB) of ``simindex ingest`` of one document of ``chars`` characters of
    ``kind`` into a fresh SQLite database. The document is made in a process of its own:
    Linux counts in a child's peak RSS the peak of the process that started it (it keeps
    the larger at exec), so this one must stay smaller than what it measures."""
    path = folder / "bench_bigdoc.jsonl"
    maker = multiprocessing.get_context("spawn").Process(
        target=write_document, args=(path, chars, kind)
    )
    maker.start()
    maker.join()
    if maker.exitcode:
        raise RuntimeError(f"making the document of {chars:,} characters failed")
    try:
        with measure.sqlite_database(folder, "bench_bigdoc") as url:
            max_chars = str(max(chars, 10_000_000))
            ingest = measure.simindex("ingest", str(path), "--db", url, "--max-chars", max_chars)
    finally:
        path.unlink()
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if own_peak >= ingest.peak_rss_mib:
        raise RuntimeError(f"this process peaked at {own_peak:.0f} MiB: it hides the child's")
    return ingest.peak_rss_mib


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000],
                        help="characters of the document")  # fmt: skip
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--sqlite-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    rows = []
    for kind in args.kinds:
        baseline = measured(BASELINE_CHARS, kind, args.sqlite_dir)
        for chars in args.sizes:
            peak = measured(chars, kind, args.sqlite_dir)
            per_char = (peak - baseline) * 2**20 / chars
            rows.append([kind, f"{chars:,}", f"{peak:,.0f}", f"{baseline:,.0f}",
                         f"{per_char:.1f}"])  # fmt: skip
            print(" | ".join(rows[-1]), flush=True)
    header = ["text", "characters", "peak RSS MiB", "baseline MiB", "bytes / character"]
    body = (
        "Peak RSS of `simindex ingest` (SQLite, defaults but --max-chars) of one document, "
        f"less the baseline (a document of {BASELINE_CHARS:,} characters), per character. "
        "ascii: Reuters' words drawn at random; cyrillic: the same in Cyrillic letters; "
        "random: letters and digits drawn at random (few shingles repeat).\n\n"
    )
    body += measure.table(header, rows)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body)


if __name__ == "__main__":
    main()
