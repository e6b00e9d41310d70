"""The version sweep's choice of versions and its bisection, with a runner of the test's
own (rows made up per version): which versions run, in which order, and where each
answer is found to change. ``tests/system/test_sweep.py`` runs a real client program through
the real runner."""

from __future__ import annotations

import asyncio

import pytest

from mcp_lab.runners.clients import sweep
from mcp_lab.runners.clients.matrix import Check, ClientRow
from mcp_lab.runners.versions import version_key

VERSIONS = [f"1.{minor}.0" for minor in range(16)]  # 1.0.0 .. 1.15.0


def row(version: str, level: int | None, subscribed: str = "no") -> ClientRow:
    made = ClientRow("fake", version, "single", "no tool", level=level, server_level=level)
    made.checklist = {"read": Check("yes"), "subscribed": Check(subscribed)}
    if level is None:
        made.fail("install failed")
    return made


class Runner:
    """Rows by version: level 3 before ``changes_at``, 5 (and subscribed) from it on;
    ``failing`` versions are the runner's failures."""

    def __init__(self, changes_at: str, failing: frozenset[str] = frozenset()) -> None:
        self.changes_at, self.failing = changes_at, failing
        self.ran: list[str] = []

    async def __call__(self, version: str) -> list[ClientRow]:
        self.ran.append(version)
        if version in self.failing:
            return [row(version, None)]
        if version_key(version) >= version_key(self.changes_at):
            return [row(version, 5, "yes")]
        return [row(version, 3)]


def run(versions: list[str], runner: Runner, **options: object) -> sweep.Sweep:
    return asyncio.run(sweep.sweep("fake", versions, runner, **options))  # type: ignore[arg-type]


def test_a_long_range_is_bisected_from_its_ends() -> None:
    runner = Runner("1.11.0")
    done = run(VERSIONS, runner)
    assert runner.ran[:2] == ["1.0.0", "1.15.0"]
    assert len(runner.ran) <= 2 + 4, runner.ran  # log2(16) middles at most
    assert [(c.key, c.before, c.after, c.version, c.exact) for c in done.changes] == [
        ("level", "3", "5", "1.11.0", True),
        ("subscribed", "no", "yes", "1.11.0", True),
    ]
    assert done.changes[0].previous == "1.10.0"
    assert "level: 3 -> 5, first at 1.11.0" in sweep.sweep_table(done)


def test_no_change_between_the_ends_runs_only_the_ends() -> None:
    runner = Runner("9.0.0")
    done = run(VERSIONS, runner)
    assert runner.ran == ["1.0.0", "1.15.0"] and done.changes == []
    assert "no answer changed" in sweep.sweep_table(done)


def test_every_n_samples_then_bisects_only_the_gap_that_changed() -> None:
    runner = Runner("1.6.0")
    done = run(VERSIONS, runner, every=5)
    assert runner.ran[:4] == ["1.0.0", "1.5.0", "1.10.0", "1.15.0"]
    # Only the gap 1.5.0 .. 1.10.0 disagrees; its middle versions are run, no others.
    assert set(runner.ran[4:]) <= {"1.6.0", "1.7.0", "1.8.0", "1.9.0"}
    assert {c.version for c in done.changes} == {"1.6.0"}
    assert all(c.exact for c in done.changes)


def test_given_versions_run_all_and_a_change_between_them_is_not_exact() -> None:
    runner = Runner("1.6.0")
    done = run(["1.0.0", "1.5.0", "1.10.0"], runner, bisect=False, run_all=True)
    assert runner.ran == ["1.0.0", "1.5.0", "1.10.0"]
    (level, _) = done.changes
    assert (level.version, level.previous, level.exact) == ("1.10.0", "1.5.0", False)
    # Every version between the two was left unrun: a sweep of exactly these cannot say more.
    assert "first at 1.10.0 of the versions run (after 1.5.0)" in level.text()


def test_a_version_the_runner_failed_gives_way_to_its_neighbour() -> None:
    runner = Runner("1.11.0", failing=frozenset({"1.7.0", "1.11.0"}))
    done = run(VERSIONS, runner)
    assert "1.7.0" in runner.ran and "1.11.0" in runner.ran
    assert done.failed("1.11.0")
    (level, _) = done.changes
    # 1.11.0 failed: the change is seen at 1.12.0, after 1.10.0, and not exactly.
    assert (level.previous, level.version, level.exact) == ("1.10.0", "1.12.0", False)


def test_the_range_leaves_out_prereleases_unless_an_end_is_one() -> None:
    listed = sorted(["1.0.0", "1.1.0-preview.1", "1.1.0", "1.2.0-nightly.3", "1.2.0"],
                    key=version_key)  # fmt: skip
    assert listed == ["1.0.0", "1.1.0-preview.1", "1.1.0", "1.2.0-nightly.3", "1.2.0"]
    assert sweep.select(listed) == ["1.0.0", "1.1.0", "1.2.0"]
    assert sweep.select(listed, "1.1.0-preview.1", "1.2.0") == ["1.1.0-preview.1", "1.1.0", "1.2.0"]
    with pytest.raises(ValueError, match="not among the released versions"):
        sweep.select(listed, "0.9.0")
    with pytest.raises(ValueError, match="comes after"):
        sweep.select(listed, "1.2.0", "1.0.0")
