"""One expensive run shared by the tests of a module (the clients' field, the bridges'
matrix: minutes each), made by the first test that needs it and kept for the others,
its failure too: a shared run that failed fails each later test at once, with one
line saying so, instead of running again for each (``functools.cache`` keeps no
exception: 19 parametrized tests once ran a 16-client field 19 times)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import pytest

P = ParamSpec("P")
T = TypeVar("T")
_SAID = 600  # characters of the first failure repeated by the later tests


def shared_run(make: Callable[P, T]) -> Callable[P, T]:
    """``make`` once per arguments; its result, or its failure again (a skip stays a
    skip: no npm is no npm for every test)."""
    made: dict[tuple[object, ...], T] = {}
    failed: dict[tuple[object, ...], tuple[bool, str]] = {}
    name = make.__name__

    @functools.wraps(make)
    def once(*args: P.args, **kwargs: P.kwargs) -> T:
        key = (*args, *sorted(kwargs.items()))
        if key in made:
            return made[key]
        if key in failed:
            skipped, why = failed[key]
            if skipped:
                pytest.skip(why)
            pytest.fail(f"the shared run {name}{_shown(args)} failed earlier: {why}", pytrace=False)
        try:
            made[key] = make(*args, **kwargs)
        except pytest.skip.Exception as exc:
            failed[key] = (True, str(exc.msg))
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            failed[key] = (False, _first_lines(exc))
            raise
        return made[key]

    return once


def _shown(args: tuple[object, ...]) -> str:
    return f"({', '.join(map(repr, args))})" if args else "()"


def _first_lines(exc: BaseException) -> str:
    text = str(getattr(exc, "msg", None) or exc) or type(exc).__name__
    if len(text) <= _SAID:
        return text
    return f"{text[:_SAID]}... (in full in the first test's failure)"
