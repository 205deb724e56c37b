"""The short examples in dtlab.nccl_log's docstrings run as written."""

import doctest
import importlib

import pytest

MODULES = ["codes", "lines", "tuning", "model", "assemble", "groups", "divergence", "sources",
           "result", "report", "net", "nodes"]


@pytest.mark.parametrize("name", ["dtlab.nccl_log"] + [f"dtlab.nccl_log.{m}" for m in MODULES])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
