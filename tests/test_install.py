"""Installing dtlab prints no deprecation banner (setuptools' boxed ``!!`` warnings).

pip builds the editable metadata exactly as ``make install`` does, minus the download of an
isolated setuptools (``--no-build-isolation``: the venv's setuptools, which must satisfy
pyproject's ``build-system.requires`` for the check to mean anything). About 2 s.
"""

import os
import subprocess
import sys

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_editable_install_prints_no_deprecation_banner():
    import setuptools

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    req = Requirement(project["build-system"]["requires"][0])
    assert req.name == "setuptools" and Version(setuptools.__version__) in req.specifier
    assert isinstance(project["project"]["license"], str)  # SPDX expression, not a table

    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--dry-run", "-e", ROOT],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Would install dtlab" in out
    for banner in ("Deprecat", "deprecat", "!!", "Warning", "********"):
        assert banner not in out, out
