"""The NCCL settings a tuning sweep may try, checked before any rank starts.

A *setting* is a dict of NCCL environment variables; ``{}`` is NCCL's own choice ("default").
NCCL reads them once, when a communicator is created, so each setting runs in fresh ranks.

===================  =============================================================================
NCCL_ALGO            Tree, Ring, CollNetDirect, CollNetChain, PAT (or a comma list of them).
                     NVLS / NVLSTree are refused: dtlab never enables NVLink multicast.
NCCL_PROTO           LL, LL128, Simple (or a comma list)
NCCL_MIN_NCHANNELS   channels NCCL must use at least (a positive whole number)
NCCL_MAX_NCHANNELS   channels NCCL may use at most
NCCL_P2P_DISABLE     1: no direct GPU-to-GPU path (NVLink/PCIe P2P) -- NCCL falls back to SHM
NCCL_SHM_DISABLE     1: no shared-memory path through the host -- with P2P off, the network
NCCL_BUFFSIZE        bytes of each connection's buffer (default 4 MiB; 4194304 or "4M")
NCCL_NVLS_ENABLE     0 only; every setting runs with NCCL_NVLS_ENABLE=0 whatever you pass
===================  =============================================================================

(NCCL's docs: docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html.)

>>> grid(NCCL_ALGO=["Ring", "Tree"], NCCL_PROTO=["LL", "Simple"])[1]
{'NCCL_ALGO': 'Ring', 'NCCL_PROTO': 'Simple'}
>>> [s.label for s in resolve_settings(["shm", {"algo": "tree"}])]
['default', 'P2P_DISABLE=1', 'ALGO=Tree']
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..nccl_log import codes as _codes
from ..vocab import parse_size

# NCCL's own names (ncclAlgoStr / ncclProtoStr, which NCCL_ALGO / NCCL_PROTO match without regard
# to case), spelled once in nccl_log.codes; every algorithm but NVLS's, which need NVLink multicast
ALGORITHMS = tuple(a for a in _codes.ALGORITHMS if not a.startswith("NVLS"))
PROTOCOLS = tuple(_codes.PROTOCOLS)
FORCED = {"NCCL_NVLS_ENABLE": "0"}  # ARCHITECTURE.md, "Contracts": NVLink multicast stays off

# name -> what a value must be; the order is the order of columns and labels
VARS = {
    "NCCL_ALGO": f"one of {', '.join(ALGORITHMS)}, or a comma list of them (NVLS is never enabled)",
    "NCCL_PROTO": f"one of {', '.join(PROTOCOLS)}, or a comma list of them",
    "NCCL_MIN_NCHANNELS": "a positive whole number of channels, e.g. 4",
    "NCCL_MAX_NCHANNELS": "a positive whole number of channels, e.g. 1",
    "NCCL_P2P_DISABLE": "0 or 1",
    "NCCL_SHM_DISABLE": "0 or 1",
    "NCCL_BUFFSIZE": "a positive number of bytes, e.g. 4194304 or '4M'",
    "NCCL_NVLS_ENABLE": "0 (dtlab never enables NVLink multicast)",
}
TUNABLE = tuple(v for v in VARS if v not in FORCED)

# One setting each, by name; groups below name several.
PRESETS: dict[str, dict[str, str]] = {
    "default": {},
    "shm": {"NCCL_P2P_DISABLE": "1"},                          # GPUs talk through host memory
    "net": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},  # ... through the network stack
    "ring": {"NCCL_ALGO": "Ring"},
    "tree": {"NCCL_ALGO": "Tree"},
    "ll": {"NCCL_PROTO": "LL"},
    "ll128": {"NCCL_PROTO": "LL128"},
    "simple": {"NCCL_PROTO": "Simple"},
    "max_channels_1": {"NCCL_MAX_NCHANNELS": "1"},
    "max_channels_4": {"NCCL_MAX_NCHANNELS": "4"},
}
GROUPS: dict[str, list[str]] = {
    "transports": ["default", "shm", "net"],
    "algorithms": ["default", "ring", "tree"],
    "protocols": ["default", "ll", "ll128", "simple"],
    "channels": ["default", "max_channels_1", "max_channels_4"],
    "quick": ["default", "ring", "tree", "ll", "simple"],  # `dtlab tune` with no axis given
    # what notebook 06 shows (benchmarks/tuning_gpu.py records it on 2 GPUs)
    "course": ["default", "shm", "net", "ring", "tree", "ll", "ll128", "simple",
               "max_channels_1", "max_channels_4"],
}


@dataclass(frozen=True)
class Setting:
    """One checked setting: its label (a table row's name) and its NCCL variables."""

    label: str
    env: dict[str, str] = field(default_factory=dict)

    def launch_env(self) -> dict[str, str]:
        """What the ranks get: the setting plus NCCL_NVLS_ENABLE=0."""
        return {**self.env, **FORCED}


def var_name(name: Any) -> str:
    """'algo', 'ALGO', 'nccl_algo' -> 'NCCL_ALGO'; ValueError for a variable not swept here."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{name!r} is not an NCCL variable name; use one of {', '.join(VARS)}.")
    key = name.strip().upper().replace("-", "_")
    key = key if key.startswith("NCCL_") else "NCCL_" + key
    if key not in VARS:
        raise ValueError(f"{name!r} is not an NCCL variable dtlab.tuning sweeps; use one of "
                         f"{', '.join(VARS)} (anything else, for every setting at once: env=).")
    return key


def _names(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    by_key = {a.lower(): a for a in allowed}
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else None
    if not parts or not all(parts):
        raise ValueError(f"{name}={value!r}: must be {VARS[name]}.")
    out = []
    for p in parts:
        if name == "NCCL_ALGO" and "nvls" in p.lower().replace("_", ""):
            raise ValueError(f"{name}={value!r}: NVLS algorithms use NVLink multicast, which "
                             f"dtlab never enables; use {', '.join(ALGORITHMS)}.")
        if p.lower() not in by_key:
            raise ValueError(f"{name}={value!r}: {p!r} is not valid; must be {VARS[name]} "
                             f"(NCCL's '^' and 'func:algo' forms are not swept here).")
        out.append(by_key[p.lower()])
    return ",".join(out)


def _whole(name: str, value: Any, low: int, high: int | None = None) -> int:
    n = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        n = int(value)
    if n is None or n < low or (high is not None and n > high):
        raise ValueError(f"{name}={value!r}: must be {VARS[name]}.")
    return n


def check_value(name: Any, value: Any) -> str:
    """The checked value as the string NCCL reads, for variable ``name``; ValueError naming the
    variable and what it accepts otherwise.

    >>> check_value("NCCL_PROTO", "ll128"), check_value("buffsize", "1M")
    ('LL128', '1048576')
    """
    name = var_name(name)
    if name == "NCCL_NVLS_ENABLE":
        if str(value).strip() != "0" or isinstance(value, bool):
            raise ValueError(f"NCCL_NVLS_ENABLE={value!r}: dtlab never enables NVLink multicast "
                             f"(NVLS); every setting runs with NCCL_NVLS_ENABLE=0. Remove it.")
        return "0"
    if name == "NCCL_ALGO":
        return _names(name, value, ALGORITHMS)
    if name == "NCCL_PROTO":
        return _names(name, value, PROTOCOLS)
    if name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
        return str(_whole(name, value, 1))
    if name in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        return str(_whole(name, value, 0, 1))
    try:
        nbytes = parse_size(value, name) if not isinstance(value, bool) else 0
    except ValueError:
        nbytes = 0
    if nbytes < 1:
        raise ValueError(f"{name}={value!r}: must be {VARS[name]}.")
    return str(nbytes)


def check_setting(setting: Mapping[str, Any]) -> dict[str, str]:
    """A setting's variables checked and spelled as NCCL reads them (None values: unset)."""
    if not isinstance(setting, Mapping):
        raise ValueError(f"a setting must be a dict of NCCL variables, e.g. "
                         f"{{'NCCL_ALGO': 'Tree'}}, not {setting!r}.")
    env: dict[str, str] = {}
    for k, v in setting.items():
        name = var_name(k)
        if v is None:
            continue
        if name in env:
            raise ValueError(f"{name} is given twice in {dict(setting)!r}.")
        env[name] = check_value(name, v)
    env.pop("NCCL_NVLS_ENABLE", None)  # it is always 0 (FORCED); not a choice of this setting
    lo, hi = env.get("NCCL_MIN_NCHANNELS"), env.get("NCCL_MAX_NCHANNELS")
    if lo and hi and int(lo) > int(hi):
        raise ValueError(f"NCCL_MIN_NCHANNELS={lo} is more than NCCL_MAX_NCHANNELS={hi} in "
                         f"{dict(setting)!r}; NCCL would ignore one of them.")
    return {k: env[k] for k in VARS if k in env}


def label_of(env: Mapping[str, str]) -> str:
    """'default' for {}, else 'ALGO=Tree PROTO=LL' (NCCL_ prefix dropped, VARS order)."""
    return " ".join(f"{k.removeprefix('NCCL_')}={env[k]}" for k in VARS if k in env) or "default"


def grid(**axes: Any) -> list[dict[str, str]]:
    """Every combination of the values given per variable (the first varies slowest).

    A value of None means "leave unset" (NCCL's default). Names may omit ``NCCL_``.

    >>> for s in grid(NCCL_ALGO=["Ring", "Tree"], p2p_disable=[None, 1]):
    ...     print(s)
    {'NCCL_ALGO': 'Ring'}
    {'NCCL_ALGO': 'Ring', 'NCCL_P2P_DISABLE': '1'}
    {'NCCL_ALGO': 'Tree'}
    {'NCCL_ALGO': 'Tree', 'NCCL_P2P_DISABLE': '1'}
    """
    names, choices = [], []
    for k, vals in axes.items():
        vals = list(vals) if isinstance(vals, (list, tuple, set, range)) else [vals]
        if not vals:
            raise ValueError(f"grid({k}=[]): give at least one value (None for NCCL's default).")
        name = var_name(k)
        names.append(name)
        choices.append([None if v is None else check_value(name, v) for v in vals])
    return [check_setting(dict(zip(names, combo))) for combo in itertools.product(*choices)]


def preset(name: str) -> list[dict[str, str]]:
    """A preset's setting(s) by name: one of PRESETS, or a group of GROUPS."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key in PRESETS:
        return [dict(PRESETS[key])]
    if key in GROUPS:
        return [dict(PRESETS[p]) for p in GROUPS[key]]
    raise ValueError(f"{name!r} is not a preset; use one of {', '.join(PRESETS)}, or a group: "
                     f"{', '.join(GROUPS)}.")


def _items(settings: Any) -> Iterable[tuple[str | None, Any]]:
    """(custom label or None, setting dict) for each form :func:`resolve_settings` accepts."""
    if settings is None:
        settings = "quick"
    if isinstance(settings, str):
        settings = [s for s in settings.split(",") if s.strip()]
    if isinstance(settings, Mapping):
        if settings and all(isinstance(v, Mapping) for v in settings.values()):
            return list(settings.items())  # {label: setting}
        settings = [settings]
    if isinstance(settings, Setting):
        settings = [settings]
    out: list[tuple[str | None, Any]] = []
    for s in settings:
        if isinstance(s, Setting):
            out.append((s.label, s.env))
        elif isinstance(s, str):
            out += [(None, p) for p in preset(s)]
        elif isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str):
            out.append(s)
        else:
            out.append((None, s))
    return out


def resolve_settings(settings: Any = None, with_default: bool = True) -> list[Setting]:
    """Checked, de-duplicated settings, NCCL's default first (when ``with_default``).

    ``settings``: a list whose items are dicts of NCCL variables, preset or group names, or
    ``(label, dict)`` pairs; or ``{label: dict}``; or a name / comma list of names; None is the
    "quick" group. Settings with the same variables collapse into the first; with
    ``with_default`` the one that sets nothing comes first (added if missing).
    """
    out: list[Setting] = []
    for label, s in _items(settings):
        env = check_setting(s)
        if any(o.env == env for o in out):
            continue
        label = label_of(env) if label is None else label
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"setting label {label!r} must be a non-empty string.")
        if any(o.label == label for o in out):
            raise ValueError(f"two different settings are both labelled {label!r}; give each "
                             f"its own label.")
        out.append(Setting(label, env))
    if not out and not with_default:
        raise ValueError("no settings to sweep: give at least one (e.g. ['default', 'tree']).")
    if with_default:  # NCCL's own choices first: the baseline every margin is measured from
        base = [s for s in out if not s.env]
        if not base and any(s.label == "default" for s in out):
            raise ValueError("a setting labelled 'default' sets NCCL variables; rename it.")
        out = (base or [Setting("default", {})]) + [s for s in out if s.env]
    return out
