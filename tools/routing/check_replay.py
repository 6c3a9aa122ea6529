#!/usr/bin/env python3
"""Checks that the offline replay (cache_replay.py) is the engine's cache: for traces recorded with --no-prefetch
(no read-aheads, so the cache sees the fetches alone), replays each trace from a cold cache with the trace's own
policy and cache size, and compares hit or miss expert by expert with what the engine recorded.

    check_replay.py TRACE [TRACE ...]      exit status 1 if any expert differs

    SLUICE_TRACE_ARGS=--no-prefetch ANALYZE=0 tools/routing/make_traces.sh BUILD/bin/sluice OUT 19.4M markov
    tools/routing/check_replay.py OUT/trained/*.trace OUT/synth/*.trace
Standard library only.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cache_replay  # noqa: E402
import trace_format as tf  # noqa: E402


def main(paths: list) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    for path in paths:
        try:
            t = tf.read_trace(path)
        except tf.TraceError as e:
            print(f"check_replay: {e}", file=sys.stderr)
            return 2
        if t.prefetch:
            print(f"check_replay: {path} was recorded with the look-ahead on; record with --no-prefetch", file=sys.stderr)
            return 2
        if t.policy not in cache_replay.POLICIES:
            print(f"check_replay: {path}: policy {t.policy} is not replayed", file=sys.stderr)
            return 2
        engine = [[bool(f & tf.HIT) for _, f in r.distinct] for r in t.records]
        flags: list = []
        hits = cache_replay.replay(cache_replay.accesses_of(t), t.cache_slots, t.policy, t.n_experts, flags)[0]
        differ = sum(a != b for x, y in zip(engine, flags) for a, b in zip(x, y))
        n = sum(len(x) for x in engine)
        print(f"{'ok  ' if differ == 0 else 'DIFF'} {path}: {t.policy}, {t.cache_slots} slots: engine "
              f"{sum(map(sum, engine))} hits, replay {hits}, of {n} fetched experts; {differ} differ")
        bad += differ != 0
    print(f"{len(paths) - bad} of {len(paths)} traces equal to the expert")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
