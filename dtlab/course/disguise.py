"""Hidden inputs that change with every grading session: a launch console's addresses, ports and
host names renamed, consistently, with the session's random generator (:func:`course.rng`).

A hidden console that is the same text at every grading is answered by a table of last time's
answers (the second red team did it: the IP addresses, ports and NIC names of the consoles it had
read, mapped to the fault). Renamed, the text keeps every relation a reader reasons with -- the
port a client dialled is or is not the one the store listens on, an address is or is not the
first node's -- and loses every literal a table could key on::

    text = disguise.console(console_text, course.rng())

An NCCL log (:func:`nccl_log`) gets the same treatment: its ``host:pid:tid`` prefixes, pointers
and communicator ids, addresses and ports renamed; every line NCCL decided something on (the
transports, the channels, the variables it read) stays word for word.
"""

from __future__ import annotations

import random
import re

_IP = r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])"
_PORT = re.compile(rf"(?P<pre>{_IP}:|{_IP}, |port = |\[::\]:)(?P<port>\d{{2,5}})\b")
_HOST = re.compile(r"^==> (\S+) <==$", re.M)
_KEEP_IPS = {"0.0.0.0", "127.0.0.1"}


def console(text: str, rng: random.Random) -> str:
    """``text`` with each distinct port, IPv4 address and ``==> host <==`` name replaced by a
    distinct random one (the same replacement wherever it occurs)."""
    ports = dict.fromkeys(m.group("port") for m in _PORT.finditer(text))
    fresh = rng.sample(range(1024, 65000), len(ports))
    port_of = dict(zip(ports, map(str, fresh)))
    text = _PORT.sub(lambda m: m.group("pre") + port_of[m.group("port")], text)

    text = _rename_ips(text, rng)

    hosts = list(dict.fromkeys(_HOST.findall(text)))
    prefix = rng.choice(("node", "gpu", "host", "worker", "trn"))
    names = rng.sample(range(100, 1000), len(hosts))
    for old, num in zip(hosts, names):
        text = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w-])", f"{prefix}{num}", text)
    return text


_PREFIX = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+)(?= \[)", re.M)
_HEX = re.compile(r"\b0x[0-9a-f]{6,}\b")
_NCCL_PORT = re.compile(rf"(?P<pre>{_IP}<)(?P<port>\d{{2,5}})>")


def nccl_log(text: str, rng: random.Random) -> str:
    """``text`` (NCCL_DEBUG=INFO lines) with each host name, pid, thread id, pointer or
    communicator id (hex of 6+ digits), IPv4 address and ``ADDR<PORT>`` port replaced by a random
    one, the same replacement wherever it occurs."""
    host_of: dict[str, str] = {}
    num_of: dict[str, str] = {}
    prefix = rng.choice(("node", "gpu", "host", "worker", "trn"))

    def number(old: str) -> str:
        while old not in num_of:
            new = str(rng.randint(1000, 4_000_000))
            if new not in num_of.values():
                num_of[old] = new
        return num_of[old]

    def line_prefix(m: re.Match) -> str:
        host = host_of.setdefault(m.group("host"), f"{prefix}{rng.randint(100, 999)}")
        return f"{host}:{number(m.group('pid'))}:{number(m.group('tid'))}"

    text = _PREFIX.sub(line_prefix, text)
    hex_of: dict[str, str] = {}

    def pointer(m: re.Match) -> str:
        old = m.group(0)
        if old not in hex_of:
            digits = len(old) - 2
            hex_of[old] = f"0x{rng.randrange(16 ** (digits - 1), 16 ** digits):x}"
        return hex_of[old]

    text = _HEX.sub(pointer, text)
    ports = dict.fromkeys(m.group("port") for m in _NCCL_PORT.finditer(text))
    port_of = dict(zip(ports, map(str, rng.sample(range(1024, 65000), len(ports)))))
    text = _NCCL_PORT.sub(lambda m: f"{m.group('pre')}{port_of[m.group('port')]}>", text)
    return _rename_ips(text, rng)


def _rename_ips(text: str, rng: random.Random) -> str:
    """Each distinct IPv4 address (but 0.0.0.0 and 127.0.0.1) replaced by a distinct random
    10.x.y.z that is none of the old ones, wherever it occurs."""
    ips = [ip for ip in dict.fromkeys(re.findall(_IP, text)) if ip not in _KEEP_IPS]
    new_ips: dict[str, str] = {}
    while len(new_ips) < len(ips):
        cand = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        if cand not in new_ips.values() and cand not in ips:
            new_ips[ips[len(new_ips)]] = cand
    return re.sub(_IP, lambda m: new_ips.get(m.group(0), m.group(0)), text)
