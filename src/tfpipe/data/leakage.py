"""data.validation.leakage: what prepare does with test examples that duplicate a train example.

warn: log them; fail: stop prepare (DataError, one line; the temp folder is removed, nothing is swapped in);
drop: rewrite the prepared test split without them, inside the temp folder, before the swap.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tfpipe.errors import DataError

log = logging.getLogger(__name__)
POLICIES = ("warn", "fail", "drop")


def _describe(collector, found: dict) -> str:
    exact = found["exact"]["across"]["train-test"]["examples_in_test"]
    near = found["near"]["across"]["train-test"]["examples_in_test"]
    names = ", ".join(collector.ex.names[i] for i in found["leaked"][:3])
    return f"{len(found['leaked'])} test examples duplicate a train example ({exact} exact, {near} near; e.g. {names})"


def apply(collector, found: dict, tmp: Path, shards: dict, counts: dict, per_shard: int) -> list:
    """Apply the policy; returns the stream ids dropped from the test split (updating shards/counts)."""
    leaked = found["leaked"]
    policy = collector.validation.leakage
    if not leaked:
        return []
    if policy == "fail":
        raise DataError(
            f"data.validation.leakage=fail: {_describe(collector, found)}; remove them from the source, "
            "or set data.validation.leakage=warn|drop"
        )
    if policy == "warn":
        log.warning("leakage: %s (data.validation.leakage=warn)", _describe(collector, found))
        return []
    positions = {collector.ex.positions[i] for i in leaked}
    shards["test"], counts["test"] = _rewrite_test(tmp, shards["test"], positions, per_shard)
    log.warning(
        "leakage: dropped %s from the test split (data.validation.leakage=drop)", _describe(collector, found)
    )
    return list(leaked)


def _rewrite_test(tmp: Path, shards: list, drop: set, per_shard: int) -> tuple:
    """The test split's shards rewritten without the records at `drop` (positions in shard order)."""
    import tensorflow as tf

    from tfpipe.data.tfrecords import ShardedWriter

    paths = [tmp / s["file"] for s in shards]
    records = tf.data.TFRecordDataset([str(p) for p in paths])  # sequential: shard order
    kept = [r.numpy() for i, r in enumerate(records) if i not in drop]
    for path in paths:
        path.unlink()
    writer = ShardedWriter(tmp, "test", per_shard)
    for record in kept:
        writer.write(record)
    return writer.close(), writer.num_examples
