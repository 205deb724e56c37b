"""Byte-level text from the standard library's sources and the per-rank batch stream (~1 s)."""

import sysconfig

import pytest
import torch

from dtlab.capstone.data import batches, corpus, random_batches, sources


def test_corpus_is_the_stdlib_sources_as_bytes():
    files = sources(1 << 20)
    assert files and all(f.startswith(sysconfig.get_paths()["stdlib"]) and f.endswith(".py")
                         for f in files)
    data = corpus(1 << 20)
    assert data.dtype == torch.uint8 and data.numel() == 1 << 20
    with open(files[0], "rb") as f:
        head = f.read(100)
    assert bytes(data[:len(head)].tolist()) == head


@pytest.mark.parametrize("make", ["text", "random"])
def test_ranks_split_one_global_batch_deterministically(make):
    data = corpus(1 << 18)

    def stream(rank, world, batch):
        if make == "text":
            return batches(data, batch, 16, rank, world, seed=3)
        return random_batches(300, batch, 16, rank, world, seed=3)

    whole = next(stream(0, 1, 8))               # world 1: the global batch of step 0
    parts = [next(stream(r, 4, 2)) for r in range(4)]
    assert torch.equal(torch.cat([x for x, _ in parts]), whole[0])
    x, y = whole
    assert torch.equal(x[:, 1:], y[:, :-1]) and x.dtype == torch.int64
    s = stream(1, 4, 2)
    a, b = next(s), next(s)
    assert not torch.equal(a[0], b[0])                      # a new window every step
    assert torch.equal(next(stream(1, 4, 2))[0], a[0])      # and the same again from the start


def test_bad_arguments():
    with pytest.raises(ValueError, match="rank=2"):
        next(batches(corpus(1 << 17), 2, 16, rank=2, world=2))
