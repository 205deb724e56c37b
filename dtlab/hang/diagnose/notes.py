"""How a verdict is worded: the symptoms listed beside the cause, ranks and groups as text.

Exit wording comes from :mod:`dtlab.vocab` (``exit_summary``: "exit code 3", "killed by
SIGKILL"), the one source of signal names. Text quoted from evidence is clipped at a word
boundary with an ellipsis, never mid-word.
"""

from __future__ import annotations

from ...vocab import exit_summary


def clip(text: str, most: int) -> str:
    """``text`` on one line, at most ``most`` characters, cut at a word boundary with '…'.

    >>> clip("Connection closed by peer [127.0.0.1]:2345", 30)
    'Connection closed by peer…'
    """
    text = " ".join(str(text).split())
    if len(text) <= most:
        return text
    cut = text[:most - 1]
    space = cut.rfind(" ")
    if space > most // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:([") + "…"


def add_context(f, note, evidence: list, most: int = 10) -> None:
    """What else the evidence says, so a person sees the symptoms beside the cause.

    ``note(file, kind, finding)`` adds one item to ``evidence``; at most ``most`` in all."""
    for kind, say in (("fatal", lambda s: f"rank {s.rank}: {s.data['reason']}"
                       + (f": {clip(s.data['cpp_message'], 140)}" if s.data.get("cpp_message") else "")),
                      ("gloo_size", lambda s: f"rank {s.rank}: gloo received {s.data['got']} "
                       f"bytes where it expected {s.data['expected']}"),
                      ("watchdog", lambda s: f"rank {s.rank}: NCCL watchdog: collective "
                       f"#{s.data['seq']} ({s.data['op']}) timed out"),
                      ("gloo_timeout", lambda s: f"rank {s.rank}: gloo {s.data['op']} timed "
                       f"out after {s.data['ms']} ms"),
                      ("peer_lost", lambda s: f"rank {s.rank}: lost its peer "
                       f"({clip(s.line, 90)})"),
                      ("exception", exception_finding)):
        for sig in f.of(kind):
            if len(evidence) >= most:
                return
            if sig.rank is None:
                continue  # the launcher's own traceback (SignalException, ChildFailedError)
            note(sig.path, kind, say(sig))
    for r, st in sorted(f.stacks.items()):
        if len(evidence) >= most or not st.data.get("site"):
            continue
        note(st.path, "stacks", f"rank {r} ({st.data['when']}): in "
             f"{st.data.get('dist_op') or 'no collective'} at {st.data.get('site')}")
    if f.outside:
        note("console", "launcher", f"the whole job was stopped from outside ({clip(f.outside, 120)})"
                                    f": no rank is blamed for the signals that ended it")
    for line in f.launcher_lines[:3]:
        if len(evidence) < most:
            note("console", "launcher", clip(line, 160))


def exception_text(data: dict, most: int = 120) -> str:
    """An exception signal's ``Type: message`` as Python prints it, the bare type when the
    message is empty, and the cause of a chained exception after it."""
    text = f"{data['type']}: {clip(data['message'], most)}" if data.get("message") else data["type"]
    return text + (f" (raised from {clip(data['cause'], 60)})" if data.get("cause") else "")


def exception_finding(s) -> str:
    return (f"rank {s.rank}: {exception_text(s.data, 110)}"
            + (f" (at {s.data['site']})" if s.data.get("site") else ""))


def add_unreadable(f, note, most: int = 20) -> None:
    """One evidence line per file that was skipped or could not be made sense of."""
    for path, why in f.unreadable[:most]:
        note(path, "unreadable", why)
    if len(f.unreadable) > most:
        note("...", "unreadable", f"and {len(f.unreadable) - most} more files not used")


def ended(code: int) -> str:
    """How a rank with no Python traceback in the evidence ended: 'exit code 3', 'killed by
    SIGKILL' (never 'without a Python exception': the traceback may be in output not given)."""
    return exit_summary(code) + ("" if code < 0 else ", with no Python traceback in the evidence")


def join(ranks) -> str:
    ranks = sorted(ranks)
    return ", ".join(map(str, ranks)) if ranks else "?"


def ranks_word(ranks) -> str:
    return ("rank " if len(list(ranks)) == 1 else "ranks ") + join(ranks)


def per_rank_counts(counts: dict) -> str:
    return ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))


def describe(groups: dict) -> str:
    parts = []
    for sig, ranks in groups.items():
        if sig == ("none",):
            parts.append(f"{ranks_word(ranks)}: none")
        else:
            parts.append(f"{ranks_word(ranks)}: " + " ".join(str(x) for x in sig if x is not None))
    return "; ".join(parts)


def undecided(ranks, tells: str) -> str:
    """The sentence for a verdict with no majority: every candidate, and what would decide."""
    return (f"With no majority, any of {ranks_word(ranks)} may be the odd one out; what would tell "
            f"them apart: {tells}.")


TELLS = ("the program's source at that call on each rank, a run with a third rank, or the "
         "Flight Recorder stack (frames) of each rank's call")
