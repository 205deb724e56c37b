"""03's hidden machines drawn per grading session (dtlab.course.topologies): another session,
other machines; the same session, the same ones; and the library's answers, which the hidden
tests hold a learner to, are the reference solutions' answers on every draw."""

import random

import pytest

from answers import reference
from dtlab.course import topologies as T

CASES = {"slowest_pairs": T.slowest_pairs_cases, "nearest_nic": T.nearest_nic_cases,
         "ring_bottleneck": T.ring_bottleneck_cases}


@pytest.mark.parametrize("name", CASES)
def test_drawn_per_session_and_the_reference_agrees(name):
    solved: dict = {}
    exec(reference("03_topology", name), solved)
    for seed in range(25):
        for *args, want in CASES[name](random.Random(seed)):
            assert solved[name](*args) == want, (seed, args)
    assert CASES[name](random.Random(1)) == CASES[name](random.Random(1))
    assert CASES[name](random.Random(1)) != CASES[name](random.Random(2))


def test_a_machine_past_ten_gpus_tells_number_order_from_text_order():
    for seed in range(30):
        links, want = T.slowest_pairs_cases(random.Random(seed))[-1]
        assert len(links) > 10 and any(int(a[3:]) < 10 <= int(b[3:]) for a, b in want["pairs"])
