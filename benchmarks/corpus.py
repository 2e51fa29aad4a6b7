"""The one corpus every benchmark uses: Reuters-21578 stories, enlarged to N documents with
planted near-duplicates, and the exact ground truth of its near-duplicate pairs.

A corpus is named by its size: ``reuters`` (the Reuters stories as they are, those whose
normalized text is empty left out) or a number of documents N, generated with a seed. In a
generated corpus, about 15% of the documents are edited copies of an earlier document (1-5
word substitutions, deletions or insertions; sometimes a sentence removed or one appended),
named in the record's ``dup_of``; the others are "new" stories (a Reuters story with its
sentences shuffled and 30% of its words replaced by random made-up words, so that two new
stories are not near-duplicates of each other).

Files are JSON lines (``{"id": "<row number>", "text": ...}``), gzip-compressed and cached
under benchmarks/data/ (git-ignored) with their ground truth: every pair of documents whose
exact Jaccard similarity of shingles is at least the threshold, with the shingles simindex
uses (``simindex.normalize``, then ``simindex.shingle_sets``: character 5-grams), found by an
exact all-pairs join (prefix filtering) that does not use simindex's index.

The scripts next to it import this module; ``python benchmarks/corpus.py SIZE`` makes a
corpus and its ground truth ahead of them.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REUTERS = REPO.parent / "shared" / "data" / "reuters21578.jsonl.gz"
DATA = REPO / "benchmarks" / "data"
SEED = 20240601
THRESHOLD = 0.8
GENERATOR_VERSION = 3  # names the cache files: bump when the generator changes
DUPLICATE_RATE = 0.15  # share of generated documents that are edited copies
NEW_STORY_REPLACE = 0.30  # share of a new story's words replaced by made-up words
MADE_UP_WORDS = 1_000_000

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]


def reuters_texts() -> list[str]:
    """The Reuters-21578 texts in file order, less those that normalize to nothing."""
    from simindex import normalize

    with gzip.open(REUTERS, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return [t for t in texts if normalize(t)]


class Editor:
    """Seeded edits over the Reuters sentences and vocabulary."""

    def __init__(self, texts: list[str], rng: np.random.Generator):
        self.rng = rng
        self.stories = [split_sentences(t) for t in texts]
        self.sentences = [s for story in self.stories for s in story]
        self.vocabulary = sorted({w for t in texts for w in t.split() if w.isalpha()})
        # A vocabulary far larger than Reuters' keeps two new stories made from the same
        # Reuters story apart, so the true pairs are the planted ones and Reuters' own.
        lengths = rng.integers(3, 11, size=MADE_UP_WORDS)
        letters = (rng.integers(0, 26, size=int(lengths.sum())) + ord("a")).astype(np.uint8)
        joined = letters.tobytes().decode("ascii")
        ends = np.cumsum(lengths).tolist()
        self.made_up = [joined[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]

    def word(self) -> str:
        return self.vocabulary[int(self.rng.integers(len(self.vocabulary)))]

    def new_story(self) -> str:
        """A Reuters story, sentences shuffled, NEW_STORY_REPLACE of its words made up."""
        rng = self.rng
        story = self.stories[int(rng.integers(len(self.stories)))]
        words = " ".join(story[i] for i in rng.permutation(len(story))).split()
        replaced = np.flatnonzero(rng.random(len(words)) < NEW_STORY_REPLACE)
        picks = rng.integers(len(self.made_up), size=replaced.size)
        for i, pick in zip(replaced.tolist(), picks.tolist(), strict=True):
            words[i] = self.made_up[pick]
        return " ".join(words)

    def edited_copy(self, text: str) -> str:
        """1-5 word edits; 20%: a sentence removed (of 3 or more); 25%: a sentence appended."""
        rng = self.rng
        sentences = split_sentences(text)
        if len(sentences) >= 3 and rng.random() < 0.20:
            del sentences[int(rng.integers(len(sentences)))]
        if rng.random() < 0.25:
            sentences.append(self.sentences[int(rng.integers(len(self.sentences)))])
        words = " ".join(sentences).split()
        for _ in range(int(rng.integers(1, 6))):
            edit = int(rng.integers(3))
            if edit == 0:
                words[int(rng.integers(len(words)))] = self.word()
            elif edit == 1 and len(words) > 1:
                del words[int(rng.integers(len(words)))]
            else:
                words.insert(int(rng.integers(len(words) + 1)), self.word())
        return " ".join(words)


def corpus_path(size: str | int, seed: int = SEED) -> Path:
    """Where the corpus of ``size`` ("reuters" or a number of documents) is cached."""
    if str(size) == "reuters":
        return DATA / f"reuters_v{GENERATOR_VERSION}.jsonl.gz"
    return DATA / f"gen{int(size)}_seed{seed}_v{GENERATOR_VERSION}.jsonl.gz"


def _truth_path(path: Path, threshold: float) -> Path:
    return path.with_name(path.name.removesuffix(".jsonl.gz") + f"_truth{threshold}.npy")


def corpus(size: str | int, seed: int = SEED) -> Path:
    """The corpus of ``size`` documents as a .jsonl.gz file, generated unless cached (in a
    process of its own: see :func:`prepared`)."""
    path = corpus_path(size, seed)
    if not path.exists():
        subprocess.run([sys.executable, __file__, str(size), "--seed", str(seed)], check=True)
    return path


def write_corpus(size: str | int, seed: int = SEED) -> Path:
    """Generate the corpus of ``size`` documents into its cache file."""
    path = corpus_path(size, seed)
    texts = reuters_texts()
    DATA.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    with gzip.open(scratch, "wt", encoding="utf-8", compresslevel=3) as f:
        if str(size) == "reuters":
            records = ({"id": str(i), "text": t} for i, t in enumerate(texts))
        else:
            records = _generated(int(size), Editor(texts, np.random.default_rng(seed)))
        for record in records:
            f.write(json.dumps(record) + "\n")
    scratch.rename(path)
    return path


def _generated(size: int, editor: Editor) -> Iterator[dict]:
    written: list[str] = []
    for i in range(size):
        if i and editor.rng.random() < DUPLICATE_RATE:
            source = int(editor.rng.integers(i))
            written.append(editor.edited_copy(written[source]))
            yield {"id": str(i), "text": written[-1], "dup_of": str(source)}
        else:
            written.append(editor.new_story())
            yield {"id": str(i), "text": written[-1]}


def documents(path: Path) -> Iterator[tuple[str, str]]:
    """(id, text) of each record of a corpus file, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            yield record["id"], record["text"]


def queries(path: Path, count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """``count`` (source id, text) pairs: edited copies of random documents of the corpus,
    texts that are not in it (a point query's typical input)."""
    texts = [text for _, text in documents(path)]
    editor = Editor(texts[:2000], np.random.default_rng(seed + 1))
    sources = editor.rng.choice(len(texts), size=min(count, len(texts)), replace=False)
    return [(str(s), editor.edited_copy(texts[s])) for s in sources.tolist()]


def truth(path: Path, threshold: float = THRESHOLD) -> np.ndarray:
    """Every pair (a, b), a < b, of row numbers of the corpus whose exact Jaccard similarity
    of shingles is >= ``threshold``: an int64 array of shape (pairs, 2), sorted, cached."""
    cache = _truth_path(path, threshold)
    if cache.exists():
        return np.load(cache)
    from simindex import SignatureSpec, normalize, shingle_sets

    spec = SignatureSpec()
    hashes, counts = [], []
    texts: list[str] = []
    for _, text in documents(path):
        texts.append(normalize(text))
        if len(texts) == 20_000:
            sets = shingle_sets(texts, spec)
            hashes.append(sets.hashes)
            counts.append(sets.counts)
            texts = []
    if texts:
        sets = shingle_sets(texts, spec)
        hashes.append(sets.hashes)
        counts.append(sets.counts)
    pairs = similar_pairs(np.concatenate(hashes), np.concatenate(counts), threshold)
    np.save(cache, pairs)
    return pairs


def prepared(size: str | int) -> tuple[Path, np.ndarray]:
    """The corpus of ``size`` and its ground truth, made in a process of their own if not
    cached: a command started later from this process would otherwise inherit the join's
    peak RSS as its own (Linux carries ``ru_maxrss`` across fork and exec)."""
    path = corpus(size)
    if not _truth_path(path, THRESHOLD).exists():
        subprocess.run([sys.executable, __file__, str(size), "--truth"], check=True)
    return path, truth(path)


def similar_pairs(hashes: np.ndarray, counts: np.ndarray, threshold: float) -> np.ndarray:
    """The exact all-pairs join: (a, b) with |A ∩ B| / |A ∪ B| >= ``threshold``, where set i
    is ``hashes[offsets[i]:offsets[i + 1]]`` (distinct values; ``counts`` their sizes).

    Prefix filtering: with the tokens ordered rarest first, two sets that reach the threshold
    share a token among the first ``n - ceil(threshold * n) + 1`` of each; the pairs that do
    are candidates, and each candidate's Jaccard is computed exactly.
    """
    documents_ = np.repeat(np.arange(counts.size), counts)
    _, token, frequency = np.unique(hashes, return_inverse=True, return_counts=True)
    rank = np.empty(frequency.size, np.int64)
    rank[np.argsort(frequency, kind="stable")] = np.arange(frequency.size)
    ranks = rank[token.ravel()]
    order = np.lexsort((ranks, documents_))
    ranks, documents_ = ranks[order], documents_[order]
    offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    position = np.arange(ranks.size) - offsets[documents_]
    prefix = counts - np.ceil(threshold * counts - 1e-9).astype(np.int64) + 1
    chosen = position < prefix[documents_]
    candidates = _sharing(ranks[chosen], documents_[chosen])
    sizes = counts[candidates]
    candidates = candidates[sizes.min(axis=1) >= threshold * sizes.max(axis=1) - 1e-9]
    found = []
    for a, b in candidates.tolist():
        common = np.intersect1d(
            ranks[offsets[a] : offsets[a + 1]], ranks[offsets[b] : offsets[b + 1]], True
        ).size
        if common >= threshold * (counts[a] + counts[b] - common) - 1e-9:
            found.append((a, b))
    return np.array(sorted(found), np.int64).reshape(-1, 2)


def _sharing(tokens: np.ndarray, owners: np.ndarray) -> np.ndarray:
    """The distinct pairs (a, b), a < b, of owners that hold a token in common."""
    order = np.argsort(tokens, kind="stable")
    tokens, owners = tokens[order], owners[order]
    starts = np.flatnonzero(np.r_[True, tokens[1:] != tokens[:-1]])
    sizes = np.diff(np.r_[starts, tokens.size])
    found = [np.empty((0, 2), np.int64)]
    for size in np.unique(sizes[sizes > 1]).tolist():
        members = owners[starts[sizes == size][:, None] + np.arange(size)]
        first, second = np.triu_indices(size, 1)
        a, b = members[:, first].ravel(), members[:, second].ravel()
        found.append(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1))
    return np.unique(np.concatenate(found), axis=0)


def components(pairs: np.ndarray, size: int) -> np.ndarray:
    """The connected component (its smallest member) of each of ``size`` documents, given
    the pairs (a, b) that join them."""
    parent = np.arange(size)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs.tolist():
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([root(i) for i in range(size)])


def dedup_quality(removed: set[int], truth_pairs: np.ndarray, size: int) -> dict[str, float]:
    """Precision and recall of a deduplication that removed the documents ``removed`` (row
    numbers), against the exact pairs: a correct removal is of a document with a true
    near-duplicate; a component of k documents joined by true pairs should lose k - 1 (any
    k - 1: the score does not depend on which one a tool keeps)."""
    component = components(truth_pairs, size)
    members = np.bincount(component, minlength=size)
    duplicated = members[component] > 1
    correct = sum(bool(duplicated[i]) for i in removed)
    removed_per_component = np.bincount(
        component[np.fromiter(removed, np.int64, len(removed))], minlength=size
    )
    should = np.maximum(members - 1, 0)
    return {
        "removed": len(removed),
        "should_remove": int(should.sum()),
        "precision": correct / len(removed) if removed else 1.0,
        "recall": int(np.minimum(removed_per_component, should).sum()) / max(int(should.sum()), 1),
    }


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Make a benchmark corpus (and its truth).")
    parser.add_argument("size", help="'reuters' or a number of documents")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--truth", action="store_true", help="also its exact ground truth")
    args = parser.parse_args()
    path = corpus_path(args.size, args.seed)
    if not path.exists():
        write_corpus(args.size, args.seed)
    print(path)
    if args.truth:
        print(f"{len(truth(path)):,} pairs with Jaccard >= {THRESHOLD}")


if __name__ == "__main__":
    main()
