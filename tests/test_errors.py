"""The error tree as ``_errors.py`` draws it, and the one way task-group wrapping is undone."""

from __future__ import annotations

import re

import anyio
import pytest

import kubemux
from kubemux import _errors
from kubemux._errors import exception_leaves, unwrap


def drawn_tree() -> dict[str, str]:
    """class -> its parent, as the module docstring draws them (a class's column is its
    depth)."""
    classes = {n for n, v in vars(_errors).items() if isinstance(v, type)}
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (_errors.__doc__ or "").splitlines():
        found = re.match(r"^[\s│├└─]*([A-Z]\w+)", line)
        if found is None or found.group(1) not in classes:
            continue
        depth = found.start(1)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[found.group(1)] = stack[-1][1]
        stack.append((depth, found.group(1)))
    return parents


def test_the_docstring_draws_the_error_tree_as_it_is() -> None:
    drawn = drawn_tree()
    real = {
        cls.__name__: cls.__mro__[1].__name__
        for cls in vars(_errors).values()
        if isinstance(cls, type)
        and issubclass(cls, _errors.KubemuxError)
        and cls is not _errors.KubemuxError
    }
    assert drawn == real  # ServerTimeout under ClusterUnreachable, as it is


def test_unwrap_gives_the_lone_error_and_keeps_every_other() -> None:
    lone = KeyError("a")
    assert unwrap(ExceptionGroup("g", [ExceptionGroup("h", [lone])])) is lone
    assert unwrap(lone) is lone
    first, second, third = ValueError("one"), KeyError("two"), OSError("three")
    nested = ExceptionGroup("g", [first, ExceptionGroup("h", [second, third])])
    assert exception_leaves(nested) == [first, second, third]
    assert unwrap(nested) is first
    assert first.__notes__ == ["also raised: KeyError: 'two'", "also raised: OSError: three"]
    unwrap(nested)  # again: no note twice
    assert len(first.__notes__) == 2


def test_unwrap_leaves_a_cancellation_among_several_as_it_is() -> None:
    group = BaseExceptionGroup("g", [ValueError("x"), KeyboardInterrupt()])
    assert unwrap(group) is group


async def test_a_task_groups_errors_come_out_unwrapped_and_none_is_lost() -> None:
    async def fail(exc: Exception) -> None:
        raise exc

    async def both() -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(fail, kubemux.Forbidden(403, "Forbidden", "no"))
                tg.start_soon(fail, kubemux.Unauthorized(401, "Unauthorized", "who"))
                await anyio.sleep_forever()
        except BaseExceptionGroup as group:
            raise unwrap(group) from None

    with pytest.raises(kubemux.Forbidden) as info:
        await both()
    assert any("Unauthorized" in note for note in info.value.__notes__)
