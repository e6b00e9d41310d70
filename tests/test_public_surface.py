"""The public surface (``mcp_lab.FixtureLab``, the check API, the verdict types): each
name resolves to the class or function its internal module defines, and ``import
mcp_lab`` alone imports none of them."""

import subprocess
import sys

import mcp_lab
from mcp_lab.runners.clients import check, fixture_lab


def test_every_public_name_resolves_to_its_definition() -> None:
    assert mcp_lab.FixtureLab is fixture_lab.FixtureLab
    assert mcp_lab.LabVerdict is fixture_lab.LabVerdict
    assert mcp_lab.check is check.check
    assert mcp_lab.Verdict is check.Verdict
    assert mcp_lab.CheckError is check.CheckError
    assert mcp_lab.exit_code is check.exit_code
    assert sorted(mcp_lab.__all__) == sorted(mcp_lab._PUBLIC)
    assert set(mcp_lab.__all__) <= set(dir(mcp_lab))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        mcp_lab.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("mcp_lab.no_such_name resolved")


def test_import_mcp_lab_imports_no_submodule() -> None:
    code = "import sys, mcp_lab; print(sorted(m for m in sys.modules if m.startswith('mcp_lab.')))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"
