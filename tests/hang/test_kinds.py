"""The reproducers themselves: the planted bug is the only thing wrong with them."""

import torch
import torch.distributed as dist

import dtlab
from dtlab.hang import kinds


def test_p2p_deadlock_sends_and_receives_through_separate_buffers(monkeypatch):
    # the recorded H200 run sent and received through one buffer; the bug taught is only the
    # order (everyone sends first), so a receive must never write into the tensor being sent
    seen = {}
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dtlab, "device", lambda: torch.device("cpu"))
    monkeypatch.setattr(dist, "send", lambda t, dst: seen.setdefault("send", (t, dst)))
    monkeypatch.setattr(dist, "recv", lambda t, src: seen.setdefault("recv", (t, src)))
    kinds._p2p_ring_send_first(3)
    (sent, dst), (received, src) = seen["send"], seen["recv"]
    assert (dst, src) == (1, 2)
    assert sent.data_ptr() != received.data_ptr() and sent.shape == received.shape
