"""Generate a scheme's golden vectors from the simindex library (run once, then commit).

    .venv/bin/python tests/golden/make_vectors.py simindex-v1   # -> vectors.json
    .venv/bin/python tests/golden/make_vectors.py simindex-v2   # -> vectors-v2.json

The vectors pin a signature scheme (docs/spec.md). Once written they must never be edited
to make a test pass: every index built with simindex stores these values, so a change to any
of them is a new scheme (a new name in simindex.spec.SCHEMES), not a fix to the vectors.
Regenerating is only legitimate when adding new texts or cases; the test compares the old
vectors against the library, so check `git diff` shows additions only.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np

from simindex.pipeline.banding import band_keys
from simindex.pipeline.minhash import signatures
from simindex.pipeline.shingle import content_hash, normalize, shingle_sets
from simindex.spec import NORMALIZATION, SCHEME_V1, SCHEME_V2, SignatureSpec

VECTOR_FILES = {
    SCHEME_V1: Path(__file__).with_name("vectors.json"),
    SCHEME_V2: Path(__file__).with_name("vectors-v2.json"),
}
FIRST_HASHES = 8

# (id, description, text, extra cases beyond the default char k=5 / 128 / seed 1).
DEFAULT = {"shingle": "char", "k": 5, "num_perm": 128, "seed": 1}
WORD3 = {"shingle": "word", "k": 3, "num_perm": 128, "seed": 1}
SMALL = {"shingle": "char", "k": 5, "num_perm": 16, "seed": 42}

TEXTS: list[tuple[str, str, str, list[dict]]] = [
    (
        "spec-example",
        "the worked example of docs/spec.md section 9",
        "Hello,  World!\n",
        [],
    ),
    (
        "plain-english",
        "plain ASCII English sentence",
        "The quick brown fox jumps over the lazy dog.",
        [WORD3, SMALL, {"shingle": "word", "k": 1, "num_perm": 128, "seed": 1}],
    ),
    (
        "case-and-whitespace",
        "mixed case; runs of spaces, tabs, CR/LF; leading and trailing whitespace",
        "  Hello,\tWORLD!\n\nThis  is   a\r\nTEST\t\t of\x0bwhitespace.  ",
        [WORD3],
    ),
    (
        "unicode-whitespace",
        "NBSP, em space, ideographic space, U+001C, U+0085 are whitespace; ZWSP U+200B is not; "
        "U+00A8 becomes space + U+0308 under NFKC",
        "a\u00a0b\u2003c\u3000d\x1ce\x85f\u200bg x\u00a8y",
        [WORD3],
    ),
    (
        "nfkc-fullwidth-ligature",
        "fullwidth Latin, fi/ffl ligatures, circled digit, Roman numeral, superscript",
        "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff34\uff25\uff38\uff34: "
        "the \ufb01ne \ufb04uent \u2460 \u216b x\u00b2",
        [],
    ),
    (
        "nfkc-step-order",
        "Turkish dotted capital I (lowercases to 2 code points) and H + U+0331, which NFKC "
        "leaves alone but which composes to U+1E96 after lower(): normalize is applied once, "
        "in order, and is not idempotent",
        "\u0130STANBUL H\u0331",
        [],
    ),
    (
        "greek",
        "Greek with polytonic accents; capital sigma lowercases to final sigma at word ends",
        "\u1f08\u03c1\u03c7\u1f74 \u1f25\u03bc\u03b9\u03c3\u03c5 "
        "\u03c0\u03b1\u03bd\u03c4\u03cc\u03c2 "
        "\u2014 \u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u039f\u03a3",
        [WORD3],
    ),
    (
        "cjk",
        "Japanese (no spaces: one word) with fullwidth punctuation",
        "\u6771\u4eac\u90fd\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\uff08\uff34\uff4f\uff4b\uff59\uff4f\uff09",
        [SMALL, WORD3],
    ),
    (
        "astral",
        "code points above U+FFFF: emoji (one code point each, two UTF-16 units) and "
        "mathematical fraktur letters that NFKC maps to ASCII",
        "Deploy \U0001f680 then \U0001f389\U0001f389 party "
        "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522",
        [],
    ),
    (
        "repeated-shingles",
        "repeated emoji: 7 code points give 3 shingles but only 1 distinct hash",
        "\U0001f600" * 7,
        [],
    ),
    (
        "shorter-than-k",
        "3 characters, k=5: one shingle of the whole text",
        "abc",
        [],
    ),
    (
        "exactly-k",
        "5 characters, k=5: one shingle",
        "ABCDE",
        [],
    ),
    (
        "single-word",
        "one word: word shingles with fewer than k words give one shingle of all words",
        "Supercalifragilisticexpialidocious",
        [WORD3],
    ),
    (
        "two-words",
        "two words, word k=3: one shingle of both words",
        "hello world",
        [WORD3],
    ),
    (
        "empty-after-normalization",
        "only whitespace: normalized text is empty, zero shingles, no signature",
        " \t\n\u3000\u2028 ",
        [WORD3],
    ),
]

BANDINGS = {128: [(20, 5), (42, 3)], 16: [(4, 4), (5, 3)]}


def case(normalized: str, params: dict, scheme: str) -> dict:
    spec = SignatureSpec(**params, scheme=scheme)
    sets = shingle_sets([normalized], spec)
    hashes = sets[0]
    out = {
        **params,
        "shingle_count": int(sets.counts[0]),
        "first_hashes": [int(h) for h in hashes[:FIRST_HASHES]],
    }
    if sets.counts[0] == 0:
        out["signature"] = None
        out["band_keys"] = {}
        return out
    sig = signatures(sets, spec)
    out["signature"] = [int(v) for v in sig[0]]
    out["band_keys"] = {
        f"{bands}x{rows}": [int(x) for x in band_keys(sig, bands, rows)[0]]
        for bands, rows in BANDINGS[spec.num_perm]
    }
    return out


def build(scheme: str) -> dict:
    vectors = []
    for vid, description, text, extra in TEXTS:
        normalized = normalize(text)
        vectors.append(
            {
                "id": vid,
                "description": description,
                "text": text,
                "normalized": normalized,
                "code_points": len(normalized),
                "content_hash": content_hash(normalized),
                "cases": [case(normalized, params, scheme) for params in [DEFAULT, *extra]],
            }
        )
    return {
        "scheme": scheme,
        "normalization": NORMALIZATION,
        "note": (
            f"Golden vectors of signature scheme {scheme} (docs/spec.md). Never edit these "
            "values: a change to stored data needs a new scheme version."
        ),
        "generated_with": {
            "python": sys.version.split()[0],
            "unicode": unicodedata.unidata_version,
            "numpy": np.__version__,
        },
        "vectors": vectors,
    }


def dumps(data: dict) -> str:
    """JSON with every list of integers on one line (ASCII only: no invisible characters)."""
    text = json.dumps(data, indent=1, ensure_ascii=True)
    return re.sub(
        r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
        lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]",
        text,
    )


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in VECTOR_FILES:
        sys.exit(f"usage: make_vectors.py {{{','.join(VECTOR_FILES)}}}")
    out = VECTOR_FILES[sys.argv[1]]
    out.write_text(dumps(build(sys.argv[1])) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
