"""Keep policies and star clusters against a plain reference computed from the exact pairs.

The reference is written out here, independently of simindex.pipeline.cluster: sort the
documents by the policy, then each unclaimed document in turn claims its unclaimed
neighbours (star), or each connected component keeps its first document (components).
"""

from __future__ import annotations

import collections
import json

import pytest

from simindex import Index, SignatureSpec, normalize, shingle_sets
from simindex.pipeline.exact import similar_pairs

THRESHOLD = 0.8
POLICIES = [
    {"keep": "earliest"},
    {"keep": "latest"},
    {"keep": "longest"},
    {"keep": "shortest"},
    {"keep_by": "score", "keep_order": "max"},
    {"keep_by": "score", "keep_order": "min"},
    {"keep_by": "source", "keep_order": "min"},
]


def _chains(stories: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """Chains of edits planted in the news: each link ~0.9 similar to the one before, so
    the ends of a chain are not similar (components chain them, stars must not)."""
    planted = []
    for story_id, text, _ in stories[:6]:
        words = text.split()
        for link in range(1, 6):
            start = (link * 7) % max(len(words) - 8, 1)
            words = words[:start] + [f"edit{link}x{i}" for i in range(4)] + words[start + 4 :]
            planted.append((f"{story_id}-v{link}", " ".join(words), {}))
    return planted


def _corpus(news):
    """The news stories and planted chains, with a ``score`` (ties, and some without one)."""
    documents = []
    for position, (external_id, text, metadata) in enumerate(news + _chains(news)):
        extra = dict(metadata)
        if position % 5:
            extra["score"] = position % 4
        documents.append((external_id, text, extra))
    return documents


def _sort_key(policy: dict, position: int, external_id: str, length: int, metadata: dict):
    """The policy's order, plainly: smaller sorts first."""
    if "keep_by" in policy:
        value = metadata.get(policy["keep_by"])
        if value is None:
            return (1, 0, external_id)
        if isinstance(value, str):  # a text: min order only, in this test
            assert policy["keep_order"] == "min"
            return (0, value, external_id)
        return (0, -value if policy["keep_order"] == "max" else value, external_id)
    keep = policy["keep"]
    if keep in ("earliest", "latest"):
        return position if keep == "earliest" else -position
    return (-length if keep == "longest" else length, external_id)


def _reference(pairs, documents, policy, mode):
    """member -> representative, from the pairs (id_a, id_b) alone."""
    info = {d[0]: (i, len(_shingles(d[1])), d[2]) for i, d in enumerate(documents)}
    neighbours: dict[str, set[str]] = {}
    for a, b in pairs:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    ordered = sorted(neighbours, key=lambda d: _sort_key(policy, info[d][0], d, *info[d][1:]))
    claimed: dict[str, str] = {}
    for document in ordered:
        if document in claimed:
            continue
        if mode == "star":
            claimed[document] = document
            claimed.update((n, document) for n in neighbours[document] if n not in claimed)
            continue
        component, todo = {document}, [document]
        while todo:
            for n in neighbours[todo.pop()] - component:
                component.add(n)
                todo.append(n)
        claimed.update((m, document) for m in component)  # sorted: the first is the best
    return claimed


def _shingles(text: str) -> set[str]:
    t = normalize(text)
    return {t[i : i + 5] for i in range(max(len(t) - 4, 1))}


def _exact_pairs(documents, threshold):
    """{(id_a, id_b) sorted: exact Jaccard} of all pairs at >= threshold, in memory."""
    kept = [d for d in documents if normalize(d[1])]
    sets = shingle_sets([normalize(d[1]) for d in kept], SignatureSpec())
    a, b, jaccard = similar_pairs(sets, threshold)
    return {
        tuple(sorted((kept[x][0], kept[y][0]))): j
        for x, y, j in zip(a.tolist(), b.tolist(), jaccard.tolist(), strict=True)
    }


def _check(index, documents, truth, policy, mode):
    """Index.cluster under the policy keeps what the reference keeps, from the same exact
    pairs; in star mode every member is within the threshold of its representative."""
    index.cluster(THRESHOLD, mode=mode, **policy)
    found = {tuple(sorted((p.id_a, p.id_b))): p.exact_jaccard for p in index.pairs(THRESHOLD)}
    for pair, exact in found.items():
        assert exact == pytest.approx(truth[pair], abs=1e-12)
    clusters = {m.external_id: m.cluster for m in index.clusters()}
    assert clusters == _reference(found, documents, policy, mode)
    if mode == "star":
        for member, representative in clusters.items():
            if member != representative:
                assert truth[tuple(sorted((member, representative)))] >= THRESHOLD
    return clusters


@pytest.fixture(scope="module")
def corpus(news):
    documents = _corpus(news)
    return documents, _exact_pairs(documents, THRESHOLD)


@pytest.mark.parametrize("mode", ["star", "components"])
def test_news_clusters_follow_each_policy(db_url, corpus, mode):
    documents, truth = corpus
    with Index.create(db_url) as index:
        index.add(documents)
        index.find_pairs()
        results = {}
        for policy in POLICIES:
            results[json.dumps(policy)] = _check(index, documents, truth, policy, mode)
    assert len({json.dumps(r, sort_keys=True) for r in results.values()}) > 3  # policies differ


def test_the_chains_are_split_by_star_and_joined_by_components(tmp_path, corpus):
    documents, truth = corpus
    with Index.create(str(tmp_path / "i.db")) as index:
        index.add(documents)
        index.find_pairs()
        star = index.cluster(THRESHOLD, mode="star")
        components = index.cluster(THRESHOLD, mode="components")
    assert star.clusters > components.clusters
    assert min(c.weakest for c in star.largest_clusters) >= THRESHOLD
    assert min(c.weakest for c in components.largest_clusters) < THRESHOLD


@pytest.mark.parametrize("policy", [{"keep": "longest"}, {"keep_by": "score"}])
def test_the_kept_set_does_not_depend_on_the_batch_size(tmp_path, corpus, policy):
    documents, _ = corpus
    kept = []
    for batch_size in (7, 10_000):
        with Index.create(str(tmp_path / f"{batch_size}.db")) as index:
            index.add(documents, batch_size=batch_size)
            index.find_pairs()
            index.cluster(THRESHOLD, mode="star", **policy)
            kept.append({m.external_id: m.cluster for m in index.clusters()})
    assert kept[0] == kept[1]


def test_star_clusters_stay_right_as_pairs_arrive_and_documents_go(tmp_path, corpus):
    """Incremental pairs and deletions rebuild star clusters to what a fresh run makes."""
    documents, truth = corpus
    half = len(documents) // 2
    with Index.create(str(tmp_path / "i.db")) as index:
        index.add(documents[:half])
        index.find_pairs()
        index.cluster(THRESHOLD, mode="star", keep="longest")
        index.add(documents[half:])
        index.find_pairs()  # incremental: clusters follow
        incremental = {m.external_id: m.cluster for m in index.clusters()}
        assert incremental == _check(index, documents, truth, {"keep": "longest"}, "star")
        gone = next(m.cluster for m in index.clusters() if not m.is_representative)
        index.delete([gone])
        after = {m.external_id: m.cluster for m in index.clusters()}
        index.cluster(THRESHOLD, mode="star", keep="longest")
        assert after == {m.external_id: m.cluster for m in index.clusters()}


@pytest.mark.reuters
@pytest.mark.parametrize("policy", [{"keep": "longest"}, {"keep": "latest"}])
def test_reuters_star_clusters_follow_the_policy(tmp_path, reuters, policy):
    documents = [(i, t, {}) for i, t in reuters if normalize(t)]
    truth = _exact_pairs(documents, THRESHOLD)
    with Index.create(str(tmp_path / "i.db")) as index:
        index.add(documents)
        index.find_pairs()
        _check(index, documents, truth, policy, "star")
        report = index.cluster(THRESHOLD, mode="components", largest=10, **policy)
        _check(index, documents, truth, policy, "components")
        sizes = collections.Counter(m.cluster for m in index.clusters())
    # the ten largest, largest first, each its true size
    assert [c.size for c in report.largest_clusters] == sorted(sizes.values(), reverse=True)[:10]
    assert all(sizes[c.representative] == c.size for c in report.largest_clusters)


@pytest.mark.parametrize("keep", ["latest", "longest"])
def test_star_keeps_one_of_the_exact_copies_of_a_hot_bucket(tmp_path, keep):
    """A hot bucket links its members to one of them, not to each other: the exact copies
    still go to one representative, whichever copy the policy keeps."""
    copies = [
        (f"c{i:02}", "Subscribe to our newsletter for more news like this.") for i in range(30)
    ]
    with Index.create(str(tmp_path / "i.db")) as index:
        index.add(copies)
        assert index.find_pairs(max_bucket_size=5).hot_buckets
        report = index.cluster(THRESHOLD, mode="star", keep=keep)
        representatives = {m.cluster for m in index.clusters()}
    assert report.clusters == 1 and report.largest == 30
    assert representatives == {"c29" if keep == "latest" else "c00"}
