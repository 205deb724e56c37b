"""Bad arguments to ``dtlab.run`` and ``dtlab.Pool``: a :class:`dtlab.LaunchError` naming the
argument, raised before anything starts (no reaper, no rank, no run folder). The table is every
numeric argument x {nan, inf, negative, zero, huge, wrong type}, plus the environment's
strings. ``math.inf`` is not in it for the timeouts: there it means "no limit", as None does."""

import math

import pytest

import dtlab
from dtlab.cli import main as cli_main
from dtlab.runtime import supervisor
from dtlab.runtime.plan import MAX_RANKS

BAD_NUMBERS = {"nan": math.nan, "inf": math.inf, "negative": -1, "zero": 0, "huge": 10**12,
               "wrong-type": "5", "bool": True, "list": [2]}
# what each argument takes: (the values above it must refuse, words the error must hold)
NUMERIC = {
    "nprocs": (BAD_NUMBERS, "nprocs="),
    "timeout": ({k: v for k, v in BAD_NUMBERS.items() if k != "inf"} | {"tiny": 1e-9},
                "timeout="),
    "start_timeout": ({k: v for k, v in BAD_NUMBERS.items() if k != "inf"} | {"tiny": 1e-9},
                      "start_timeout="),
    "pg_timeout": ({k: v for k, v in BAD_NUMBERS.items() if k != "inf"} | {"tiny": 1e-9},
                   "pg_timeout="),
}
ENTRY = {  # entry point -> its numeric arguments
    "run": ("nprocs", "timeout", "start_timeout"),
    "Pool": ("nprocs", "start_timeout", "pg_timeout"),
}
BAD_ENV = {"null-in-key": {"A\x00B": "1"}, "null-in-value": {"A": "x\x00y"},
           "equals-in-key": {"A=B": "1"}, "empty-key": {"": "1"}, "int-key": {3: "1"},
           "list-value": {"A": [1]}, "not-a-dict": [("A", "1")]}


def _call(entry: str, **kw):
    if entry == "run":
        return dtlab.run(print, 1, backend="gloo", **kw)
    return dtlab.Pool(backend="gloo", **kw)


@pytest.fixture
def nothing_starts(monkeypatch, tmp_path, no_orphans):
    """Fails the test if a supervisor (run folder, store, reaper, ranks) is ever made."""
    monkeypatch.setenv("DTLAB_RUN_ROOT", str(tmp_path))

    def refuse(*a, **k):
        raise AssertionError("a bad argument got as far as starting a run")

    monkeypatch.setattr(supervisor.Supervisor, "__init__", refuse)
    monkeypatch.setattr(supervisor, "make_run_dir", refuse)
    yield
    assert list(tmp_path.iterdir()) == []


CASES = [(entry, arg, label) for entry, args in ENTRY.items() for arg in args
         for label in NUMERIC[arg][0]]


@pytest.mark.parametrize("entry,arg,label", CASES, ids=[f"{e}-{a}-{v}" for e, a, v in CASES])
def test_numeric_arguments_refused_naming_the_argument(entry, arg, label, nothing_starts):
    values, words = NUMERIC[arg]
    with pytest.raises(dtlab.LaunchError, match=words):
        _call(entry, **{arg: values[label]})


@pytest.mark.parametrize("entry", ENTRY)
@pytest.mark.parametrize("label", BAD_ENV)
def test_env_refused_naming_the_variable(entry, label, nothing_starts):
    with pytest.raises(dtlab.LaunchError, match="env"):
        _call(entry, env=BAD_ENV[label])


def test_absurd_rank_counts_say_the_limit_and_why(nothing_starts):
    with pytest.raises(dtlab.LaunchError) as ei:
        dtlab.run(print, nprocs=10**6, backend="gloo")
    text = str(ei.value)
    assert f"at most {MAX_RANKS}" in text and "GB" in text and "GPUs" in text
    with pytest.raises(dtlab.LaunchError, match=f"at most {MAX_RANKS}"):
        dtlab.Pool(nprocs=MAX_RANKS + 1, backend="gloo")


def test_fn_that_is_not_callable_is_refused(nothing_starts):
    with pytest.raises(dtlab.LaunchError, match="fn="):
        dtlab.run(3, nprocs=2, backend="gloo")


async def _coroutine_fn():
    return 1


def _generator_fn():
    yield 1


@pytest.mark.parametrize("fn", [_coroutine_fn, _generator_fn], ids=["async", "generator"])
def test_fn_whose_call_returns_no_value_is_refused(fn, nothing_starts):
    """Its call returns a coroutine or generator: no rank runs it and none can send it back."""
    with pytest.raises(dtlab.LaunchError, match="plain function"):
        dtlab.run(fn, nprocs=2, backend="gloo")


def test_validate_refuses_absurd_nprocs_in_one_line(nothing_starts, capsys):
    assert cli_main(["validate", "--nprocs", "1000000"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--nprocs 1000000" in err[0] and f"at most {MAX_RANKS}" in err[0]
