"""Hidden consoles renamed per grading session (dtlab.course.disguise): every address, port and
host becomes another, consistently, so the relations a reader reasons with hold and no literal of
an earlier session's console is left to look up."""

import random
import re

from dtlab.course import disguise

CONSOLE = """==> gpu-b17 <==
[I0302 04:11:09.118402113 TCPStore.cpp:271] [c10d - debug] The server has started on port = 6000.
==> gpu-b18 <==
[I0302 04:10:31.500112901 socket.cpp:794] [c10d - debug] The client socket will attempt to connect to an IPv4 address of (172.31.7.40, 6100).
[I0302 04:10:31.500671230 socket.cpp:931] [c10d - trace] The server socket on 172.31.7.40:6100 is not yet listening (errno: 111 - Connection refused), will retry.
gpu-b18:3107:3107 [0] NCCL INFO Bootstrap : Using ib0:172.31.7.41<0>
[I0111 01:01:01.000000000 socket.cpp:931] [c10d - trace] The server socket on [::]:29400 is not yet listening
"""


def test_every_literal_changes_and_every_relation_holds():
    a, b = disguise.console(CONSOLE, random.Random(1)), disguise.console(CONSOLE, random.Random(2))
    assert a != b and a != CONSOLE
    for old in ("172.31.7.40", "172.31.7.41", "6000", "6100", "29400", "gpu-b17", "gpu-b18"):
        assert old not in a and old not in b
    ips = re.findall(r"(?:\d{1,3}\.){3}\d{1,3}", a)
    assert len(ips) == 3 and ips[0] == ips[1] != ips[2]       # same address, same new one
    server, dialled, dialled_again, ipv6 = (re.search(p, a).group(1) for p in (
        r"port = (\d+)", r"\([\d.]+, (\d+)\)", r"on [\d.]+:(\d+)", r"\[::\]:(\d+)"))
    assert server != dialled == dialled_again != ipv6           # the wrong port stays wrong
    hosts = re.findall(r"^==> (\S+) <==$", a, re.M)
    assert len(set(hosts)) == 2 and f"\n{hosts[1]}:3107:3107 [0] NCCL" in a   # renamed everywhere
    # what does not name this cluster stays: timestamps, pids, messages
    assert "04:10:31.500112901" in a and "errno: 111 - Connection refused" in a


def test_the_same_session_renames_the_same_way():
    assert disguise.console(CONSOLE, random.Random(7)) == disguise.console(CONSOLE, random.Random(7))


def test_an_nccl_log_keeps_every_decision_and_loses_every_name():
    """06's hidden logs: the recorded files, renamed per session (a table of their hashes scored
    full marks while they were the files under data/ word for word: the third red team's A5)."""
    from dtlab.course.recorded import recorded
    from dtlab.nccl_log import parse

    both = "".join(recorded(f"h200x2-nccl-logs/default/{f}", show=False).text
                   for f in ("vm.1071.log", "vm.1072.log"))
    a, b = disguise.nccl_log(both, random.Random(1)), disguise.nccl_log(both, random.Random(2))
    assert a != b and len(a.splitlines()) == len(both.splitlines())
    assert "vm:1071:" not in a and "vm:1072:" not in a  # host and pids renamed
    ids = set(re.findall(r"commId (0x[0-9a-f]+)", both))
    assert ids and not ids & set(re.findall(r"commId (0x[0-9a-f]+)", a))
    assert len(set(re.findall(r"commId (0x[0-9a-f]+)", a))) == len(ids)  # one id stays one
    was, now = parse(both).to_dict(), parse(a).to_dict()
    for key in ("world_size", "env", "network", "tuning", "n_collectives", "divergence"):
        assert now[key] == was[key], key
    assert re.findall(r"via \S+", a) == re.findall(r"via \S+", both)
    assert re.findall(r"\d+ coll channels", a) == re.findall(r"\d+ coll channels", both)
