"""Offline replay of an expert trace through cache policies, as the engine's ExpertCache runs them.

One cache for all layers, keyed (layer, expert); each record is one fetch: its distinct experts in ascending id,
hits first (each touched), then the misses inserted in order. Experts of the fetch in progress are pinned, so a miss
with no unpinned slot left is read into staging and not cached, as in the engine. Read-aheads are not replayed: a
replay is the policy alone, the engine's run (look-ahead on) is shown beside it.

Policies: lru, lfu and next-use mirror src/experts/expert_cache.cpp (LFU: counts per expert that survive eviction,
halved every 16 * slots + 1024 touches, ties broken by recency; next-use: evict the largest expected next use in layer
visits, d + L (1 - p) / p, and do not cache a newcomer whose own is farther than the victim's); belady is the offline optimum (evict the resident, or skip caching the newcomer, whose
next use is farthest away). markov is next-use whose chance q that the next visit of the expert's layer chooses it
comes from that layer's transitions, counted online: q = mean over the experts f of the layer's latest visit of
(N[f][e] + prior p) / (M[f] + prior), M[f] the visits that chose f and were followed by another, N[f][e] those whose
next visit chose e (f's counts halved when M[f] reaches 65535, as the engine's 16-bit counts are); it evicts the
largest d + (1 - q) L / p (d and p as next-use) and admits as next-use does.
"""
from __future__ import annotations

import trace_format as tf

POLICIES = ["lru", "lfu", "next-use", "markov", "belady"]
NEXT_USE_WEIGHT = 0.1
MARKOV_PRIOR = 2.0
INF = float("inf")


def accesses_of(trace: tf.Trace) -> list:
    """Per record, the fetched experts as keys layer * n_experts + expert, ascending."""
    return [[r.layer * trace.n_experts + e for e, _ in r.distinct] for r in trace.records]


def _next_uses(acc: list) -> list:
    """nxt[i][j]: index of the next record after i that fetches acc[i][j] (INF if none)."""
    last = {}
    nxt = [None] * len(acc)
    for i in range(len(acc) - 1, -1, -1):
        nxt[i] = [last.get(k, INF) for k in acc[i]]
        for k in acc[i]:
            last[k] = i
    return nxt


def replay(acc: list, n_slots: int, policy: str, n_experts: int = 65536, hit_flags: list | None = None) -> tuple:
    """(hits, misses) of the fetches in acc (keys layer * n_experts + expert) with a cache of n_slots experts;
    hit_flags, if given, gets one list per record: whether each of its experts hit."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy}")
    resident = {}  # key -> policy state: last touch (lru), next use (belady)
    freq, clock = {}, 0
    period = 16 * n_slots + 1024
    nxt = _next_uses(acc) if policy == "belady" else None
    hits = misses = 0
    layers, visit, use, cur = [], {}, {}, [None]  # next-use: MoE layers seen, visits per layer, (average, visit)
    w = NEXT_USE_WEIGHT
    markov = policy == "markov"
    latest, before, follows, chosen_after = {}, {}, {}, {}  # markov: layer -> its latest / previous visit's keys; M; N

    def expected_next_use(r):
        layer = r // n_experts
        avg, v = use[r]
        p = min(1.0, max(1e-4, w * avg * (1 - w) ** (visit[layer] - v)))
        d = (layers.index(layer) - layers.index(cur[0])) % len(layers) or len(layers)
        if markov:
            return d + (1 - chance_next_visit(r, p)) * len(layers) / p
        return d + len(layers) * (1 - p) / p

    def chance_next_visit(r, p):  # markov: q, summed over the latest visit's experts in ascending order
        s = sorted(latest.get(r // n_experts, ()))
        if not s:
            return p
        a = b = 0.0
        for f in s:
            m = follows.get(f, 0) + MARKOV_PRIOR
            a += chosen_after.get((f, r), 0) / m
            b += 1.0 / m
        return (a + MARKOV_PRIOR * p * b) / len(s)

    def touch(k, i, j):
        nonlocal clock
        clock += 1
        if policy == "belady":
            resident[k] = nxt[i][j]
            return
        resident[k] = clock
        if policy in ("next-use", "markov"):
            note(k)
        if policy == "lfu":
            freq[k] = freq.get(k, 0) + 1
            if clock % period == 0:
                for key in freq:
                    freq[key] //= 2

    def note(k):  # next-use: count k's use in this visit of its layer (once per visit)
        layer = k // n_experts
        if layer != cur[0]:
            cur[0] = layer
            if markov and layer in latest:  # a new visit of the layer: count the transitions of the last two
                for f in before.get(layer, ()):
                    follows[f] = follows.get(f, 0) + 1
                    for e in latest[layer]:
                        chosen_after[(f, e)] = chosen_after.get((f, e), 0) + 1
                    if follows[f] == 65535:  # the engine's 16-bit counts: halved (and so aged) when full
                        follows[f] //= 2
                        for e in range(layer * n_experts, (layer + 1) * n_experts):
                            if (f, e) in chosen_after:
                                chosen_after[(f, e)] //= 2
                before[layer] = latest[layer]
            if markov:
                latest[layer] = set()
            if layer not in layers:
                layers.append(layer)
                layers.sort()
            visit[layer] = visit.get(layer, 0) + 1
        avg, v = use.get(k, (0.0, 0))
        if v != visit[layer] or avg == 0:
            use[k] = (avg * (1 - w) ** (visit[layer] - v) + 1.0, visit[layer])
        if markov:
            latest[layer].add(k)

    for i, keys in enumerate(acc):
        pinned = set()
        missed = []
        if hit_flags is not None:
            hit_flags.append([k in resident for k in keys])
        for j, k in enumerate(keys):
            if k in resident:
                hits += 1
                touch(k, i, j)
                pinned.add(k)
            else:
                misses += 1
                missed.append(j)
                if policy in ("next-use", "markov"):
                    note(k)  # the cache's on_miss
        for j in missed:
            k = keys[j]
            if n_slots == 0:
                continue
            if len(resident) >= n_slots:
                cands = [r for r in resident if r not in pinned]
                if not cands:
                    continue  # staging: read, used, not cached
                if policy == "lru":
                    victim = min(cands, key=lambda r: resident[r])
                elif policy == "lfu":
                    victim = min(cands, key=lambda r: (freq.get(r, 0), resident[r]))
                elif policy in ("next-use", "markov"):
                    victim = max(cands, key=lambda r: (expected_next_use(r), -resident[r]))
                    if expected_next_use(k) > expected_next_use(victim):
                        continue  # not admitted: staging
                else:
                    victim = max(cands, key=lambda r: resident[r])
                    if resident[victim] <= nxt[i][j]:
                        continue  # the newcomer is needed last: the optimum does not cache it
                del resident[victim]
            touch(k, i, j)
            pinned.add(k)
    return hits, misses
