"""Gradient accumulation (dtlab.parity.accumulate), for real on gloo: every way matches one
backward over the whole batch; synchronising every micro-batch costs micro times the
communication; FSDP2 with sync off holds whole gradients between micro-batches, as DDP does."""

import pytest

from dtlab.parity.accumulate import MODES, accumulation
from dtlab.parity.fsdp import TinyTransformer


def test_accumulation_counts_and_memory(no_orphans):
    rows = {r["mode"]: r for r in accumulation(nprocs=2, backend="gloo", micro=3, steps=2)}
    assert list(rows) == list(MODES)
    assert all(r["parity"] for r in rows.values()), rows
    units = 3  # fully_shard on each of the 2 blocks and on the root
    assert rows["ddp_sync_each"]["grad_syncs"] == 3 * rows["ddp_no_sync"]["grad_syncs"] == 3 * 2
    assert rows["fsdp2_sync_each"]["grad_syncs"] == 3 * 2 * units
    assert rows["fsdp2_no_sync"]["grad_syncs"] == 2 * units
    whole = 4 * sum(p.numel() for p in TinyTransformer().parameters())
    assert rows["ddp_sync_each"]["grad_bytes"] == rows["ddp_no_sync"]["grad_bytes"] == [whole] * 2
    assert rows["fsdp2_no_sync"]["grad_bytes"] == [whole] * 2
    assert all(b < 0.6 * whole for b in rows["fsdp2_sync_each"]["grad_bytes"])
    assert rows["reference"]["grad_bytes"] is None


def test_bad_arguments_are_refused_before_anything_starts():
    for kw in ({"micro": 1}, {"steps": 0}, {"nprocs": 1}, {"micro": 2.5}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            accumulation(**kw)
