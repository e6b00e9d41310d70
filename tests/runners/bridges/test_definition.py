"""Bridge files (services/mcp_lab/runners/bridges/definition.py): what a file that cannot
be used is told, key by key; a user's own file beside the built-in ones, in
``bridges list`` and ``bridges run``; the example of docs/bridges.md is a working file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mcp_lab.cli.main import build_parser
from mcp_lab.runners.bridges import specs
from mcp_lab.runners.bridges.definition import DefinitionError, load_bridge
from mcp_lab.runners.bridges.specs import (
    BRIDGE_DEFS,
    BRIDGES,
    Ends,
    bridges_with_files,
    direction,
)
from tests.support.lab import ROOT

GOOD = """
name = "my-bridge"

[install]
npm = "my-bridge"
version = "1.0.0"

[directions."stdio->HTTP"]
argv = ["{program}", "{url}"]
"""


VARIANT = '[[directions."stdio->HTTP".by_version]]'


def write(tmp_path: Path, text: str, name: str = "bridge.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(DefinitionError) as caught:
        load_bridge(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message[len(f"{path}: ") :]


def test_a_good_file_is_a_bridge(tmp_path: Path) -> None:
    bridge = load_bridge(write(tmp_path, GOOD))
    assert (bridge.name, bridge.title, bridge.source, bridge.package, bridge.version) == (
        "my-bridge", "my-bridge", "npm", "my-bridge", "1.0.0",
    )  # fmt: skip
    assert bridge.binary == "my-bridge" and bridge.origin == str(tmp_path / "bridge.toml")
    assert [w.direction for w in bridge.ways] == ["stdio->HTTP"]
    assert bridge.ways[0].start.path is None  # a stdio client has none


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("", 'nmae = "x"\n'),
            "unknown key 'nmae' in the top level (known: caveat, "
            "directions, files, install, name, title, unsupported)",
        ),
        (('name = "my-bridge"\n', ""), "missing key 'name' in the top level"),
        (
            ('name = "my-bridge"', 'name = "my bridge"'),
            "name 'my bridge': letters, digits, '-', '_' and '.' only (64 at most)",
        ),
        (('version = "1.0.0"\n', ""), "missing key 'version' in [install]"),
        (
            ('version = "1.0.0"', 'version = "1.0.0"\nvesion = "2"'),
            "unknown key 'vesion' in [install] (known: binary, npm, package, program, pypi, "
            "shares, unavailable, version)",
        ),
        (
            ('npm = "my-bridge"', 'npm = "my-bridge"\npypi = "my-bridge"'),
            "[install] needs exactly one of npm, pypi, program",
        ),
        (
            ('npm = "my-bridge"', 'program = "mine.py"'),
            "[install] program 'mine.py' is not shipped with the lab (shipped: fastmcp_proxy.py)",
        ),
        (
            ('"stdio->HTTP"', '"stdio-HTTP"'),
            "[directions.\"stdio-HTTP\"]: 'stdio-HTTP' is not a direction (CLIENT->LAB, each "
            "stdio, HTTP or SSE, such as stdio->HTTP)",
        ),
        (('"stdio->HTTP"', '"stdio->FTP"'), "'stdio->FTP' is not a direction"),
        (
            ('argv = ["{program}", "{url}"]', ""),
            "missing key 'argv' in [directions.\"stdio->HTTP\"]",
        ),
        (
            ('argv = ["{program}", "{url}"]', 'argv = "{program} {url}"'),
            '[directions."stdio->HTTP"] argv must be a non-empty list of strings',
        ),
        (
            ('argv = ["{program}", "{url}"]', 'argv = ["my-bridge", "{url}"]'),
            '[directions."stdio->HTTP"] argv must start the bridge: an element "{program}"',
        ),
        (
            ('"{url}"]', '"{ulr}"]'),
            '[directions."stdio->HTTP"] argv[1]: unknown placeholder {ulr} (known: command, '
            "command_args, command_line, command_program, folder, home, now_ms, port, program, "
            "url, version)",
        ),
        (
            ('"{url}"]', '"{port}"]'),
            '[directions."stdio->HTTP"] argv[1]: placeholder {port} has no value here (known '
            "here: folder, home, now_ms, program, url, version)",
        ),
        (('"{url}"]', '"{command}"]'), "argv[1]: placeholder {command} has no value here"),
        (
            ('"{url}"]', '"--x={program}"]'),
            "argv[1]: {program} is a list of words: it stands alone in an element",
        ),
        (
            ('"{url}"]', '"{url"]'),
            "argv[1]: expected '}' before end of string (write {{ and }} for a literal brace)",
        ),
        (
            ('"{url}"]', '"{url}"]\nport = 1'),
            "unknown key 'port' in [directions.\"stdio->HTTP\"] (known: argv, by_version, files, "
            "how, path, prefix, ready)",
        ),
        (
            ('"{url}"]', '"{url}"]\npath = "/mcp"'),
            '[directions."stdio->HTTP"] path: a string starting with / (not for a stdio client)',
        ),
    ],
)
def test_a_file_that_cannot_be_used_says_where_and_why(
    change: tuple[str, str], said: str, tmp_path: Path
) -> None:
    old, new = change
    assert old in GOOD
    assert said in refused(tmp_path, GOOD.replace(old, new, 1))


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            f'{VARIANT}\nversions = "before 1.0"\nargv = ["{{program}}"]',
            "[directions.\"stdio->HTTP\"] by_version[0] versions 'before 1.0' is not a version "
            "range (comparisons joined by commas, each <, <=, >, >= or = and a version, such as "
            '">=5.0.0, <6.0.0")',
        ),
        (
            f'{VARIANT}\nversions = ">=1.0.0, <"\nargv = ["{{program}}"]',
            "versions '>=1.0.0, <' is not a version range",
        ),
        (
            '[[directions."stdio->HTTP".by_version]]\nargv = ["{program}"]',
            "missing key 'versions' in [directions.\"stdio->HTTP\"] by_version[0]",
        ),
        ('[[unsupported]]\nversions = "<1.0.0"', "missing key 'reason' in [[unsupported]][0]"),
        (
            '[[unsupported]]\nversions = "<1.0.0"\nreason = "no {feature} before {version}"',
            "[[unsupported]][0] reason: unknown placeholder {feature}",
        ),
        (
            '[[unsupported]]\nversions = "<1.0.0"\nreason = "{url}"',
            "[[unsupported]][0] reason: placeholder {url} has no value here (known here: version)",
        ),
        (
            '[[unsupported]]\ndirections = ["HTTP->stdio"]\nversions = "<1"\nreason = "old"',
            "[[unsupported]][0] directions must be a list of this bridge's directions "
            "(stdio->HTTP)",
        ),
        (
            '[[unsupported]]\nversion = "<1"\nreason = "old"',
            "unknown key 'version' in [[unsupported]][0] (known: directions, reason, versions)",
        ),
        ('[[files]]\npath = "{folder}/x.json"', "missing key 'json' in [[files]][0]"),
        (
            '[[files]]\npath = "{folder}/x.json"\njson = { args = "--{command_args}" }',
            "[[files]][0] json['args']: placeholder {command_args} has no value here",
        ),
        (
            '[[files]]\npath = "{program}/x.json"\njson = {}',
            "[[files]][0] path: placeholder {program} has no value here",
        ),
        (
            '[[files]]\npath = "x.json"\njson = { a = "{nope}" }',
            "[[files]][0] json['a']: unknown placeholder {nope}",
        ),
    ],
)
def test_ranges_reasons_and_files_are_checked(extra: str, said: str, tmp_path: Path) -> None:
    assert said in refused(tmp_path, f"{GOOD}\n{extra}\n")


def test_a_file_that_is_not_toml_or_not_there_says_so(tmp_path: Path) -> None:
    assert refused(tmp_path, "name = ").startswith("not valid TOML: ")
    with pytest.raises(DefinitionError, match=r"absent\.toml: cannot be read: "):
        load_bridge(tmp_path / "absent.toml")
    assert refused(tmp_path, "") == "missing key 'name' in the top level"
    no_ways = GOOD.split("[directions")[0]
    assert refused(tmp_path, no_ways) == (
        "missing key 'directions' (a [directions.\"CLIENT->LAB\"] table each)"
    )


def test_a_range_picks_its_command_line_and_the_empty_version_none(tmp_path: Path) -> None:
    text = GOOD + (
        '[[directions."stdio->HTTP".by_version]]\nversions = ">=0.5, <1.0.0"\n'
        'argv = ["{program}", "--old", "{url}"]\n'
        '[[unsupported]]\nversions = "<0.5"\nreason = "{version} is too old"\n'
    )
    spec = specs.from_def(load_bridge(write(tmp_path, text)))
    assert spec.launch is not None
    way = direction("stdio->HTTP")

    def argv(version: str) -> list[str]:
        ends = Ends(["b"], way, "http://lab/mcp", None, None, tmp_path, tmp_path, version)
        assert spec.launch is not None
        return spec.launch(ends).argv

    assert argv("0.9.9") == ["b", "--old", "http://lab/mcp"]
    assert argv("1.0.0") == argv("") == ["b", "http://lab/mcp"]
    assert spec.why_not("0.4.1", way) == "0.4.1 is too old"
    assert spec.why_not("0.5.0", way) is None and spec.why_not("", way) is None


def test_every_built_in_bridge_is_a_file_of_its_own() -> None:
    files = sorted(path.stem for path in BRIDGE_DEFS.glob("*.toml"))
    assert files == sorted(BRIDGES)
    assert all(spec.origin == str(BRIDGE_DEFS / f"{name}.toml") for name, spec in BRIDGES.items())


def test_a_users_file_is_known_beside_the_built_ins_and_leaves_them_alone(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, GOOD)
    found = bridges_with_files([path])
    assert list(found)[-1] == "my-bridge" and set(BRIDGES) < set(found)
    assert specs.by_version(found["my-bridge"])
    assert "my-bridge" not in BRIDGES and "my-bridge" not in specs.known_bridges()


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def test_bridges_list_shows_a_users_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD)
    assert run(["bridges", "list", "--json", "--bridge-file", str(path)]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(listed) == {*BRIDGES, "my-bridge"}
    assert listed["my-bridge"]["directions"] == ["stdio->HTTP"]
    assert listed["my-bridge"]["origin"] == str(path)
    assert run(["bridges", "list", "--bridge-file", str(path)]) == 0
    assert re.search(r"^my-bridge +npm my-bridge@1\.0\.0 +stdio->HTTP$", capsys.readouterr().out,
                     re.MULTILINE)  # fmt: skip


def test_a_bad_file_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("{url}", "{ulr}"))
    for command in (["bridges", "run"], ["bridges", "list"]):
        assert run([*command, "--bridge-file", str(path)]) == 2
        assert f"mcp-lab: {path}: [directions" in capsys.readouterr().err
    good = write(tmp_path, GOOD, "good.toml")
    assert run(["bridges", "run", "--bridge-file", str(good), "--version", "my-bridge"]) == 2
    assert "expected NAME=VERSION" in capsys.readouterr().err


def test_the_docs_example_is_a_working_bridge_file(tmp_path: Path) -> None:
    section = (ROOT / "docs" / "bridges.md").read_text().split("## Your own bridge", 1)[1]
    example = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert example is not None
    spec = specs.from_def(load_bridge(write(tmp_path, example[1], "my-remote.toml")))
    assert spec.name == "my-remote" and spec.launch is not None
    built_in = BRIDGES["mcp-remote"]
    assert spec.directions == built_in.directions
    for way in spec.directions:
        for version in ("0.0.22", "0.15.1"):
            ends = Ends(["b"], way, "http://lab/mcp", None, None, tmp_path, tmp_path, version)
            assert built_in.launch is not None
            assert spec.launch(ends) == built_in.launch(ends)
            assert spec.why_not(version, way) == built_in.why_not(version, way)
