"""How a verdict is worded: the symptoms listed beside the cause, ranks and groups as text."""

from __future__ import annotations

import signal

from .traces import op_name


def add_context(f, note, evidence: list, most: int = 10) -> None:
    """What else the evidence says, so a person sees the symptoms beside the cause.

    ``note(file, kind, finding)`` adds one item to ``evidence``; at most ``most`` in all."""
    for kind, say in (("fatal", lambda s: f"rank {s.rank}: {s.data['reason']}"
                       + (f": {s.data['cpp_message'][:140]}" if s.data.get("cpp_message") else "")),
                      ("gloo_size", lambda s: f"rank {s.rank}: gloo received {s.data['got']} "
                       f"bytes where it expected {s.data['expected']}"),
                      ("watchdog", lambda s: f"rank {s.rank}: NCCL watchdog: collective "
                       f"#{s.data['seq']} ({s.data['op']}) timed out"),
                      ("gloo_timeout", lambda s: f"rank {s.rank}: gloo {s.data['op']} timed "
                       f"out after {s.data['ms']} ms"),
                      ("peer_lost", lambda s: f"rank {s.rank}: lost its peer ("
                       f"{s.line.strip()[:90]})"),
                      ("exception", lambda s: f"rank {s.rank}: {s.data['type']}: "
                       f"{s.data['message'][:110]}")):
        for sig in f.of(kind):
            if len(evidence) >= most:
                return
            note(sig.path, kind, say(sig))
    for r, st in sorted(f.stacks.items()):
        if len(evidence) >= most or not st.data.get("site"):
            continue
        note(st.path, "stacks", f"rank {r} ({st.data['when']}): in "
             f"{st.data.get('dist_op') or 'no collective'} at {st.data.get('site')}")


def canon_op(dist_func: str) -> str:
    return op_name(dist_func.replace("_into_tensor", "").replace("_tensor", "").replace("_single", ""))


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} without a Python exception"


def join(ranks) -> str:
    ranks = sorted(ranks)
    return ", ".join(map(str, ranks)) if ranks else "?"


def per_rank_counts(counts: dict) -> str:
    return ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))


def describe(groups: dict) -> str:
    parts = []
    for sig, ranks in groups.items():
        if sig == ("none",):
            parts.append(f"rank {join(ranks)}: none")
        else:
            parts.append(f"rank {join(ranks)}: " + " ".join(str(x) for x in sig if x is not None))
    return "; ".join(parts)
