"""Which parts of the project an answer depended on.

A linted file's findings are cached with everything its analysis read: the files whose facts
it used, the module names it looked up (found or not), the words it searched the project for.
A later run reuses the findings only if all of those are unchanged. Memoised answers inside
the model (a class's MRO, a function's summary) keep the dependencies they were computed
with and hand them to whoever reuses them, so the record is exact whichever file asked first.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Hashable, Iterator, TypeVar

T = TypeVar("T")
Dep = tuple  # ("file", path) | ("module", name, path or None) | ("word", word, paths)


class Tracker:
    def __init__(self) -> None:
        self._frames: list[set[Dep]] = []

    def note(self, dep: Dep) -> None:
        for frame in self._frames:
            frame.add(dep)

    def note_all(self, deps: Iterator[Dep] | set[Dep] | frozenset[Dep]) -> None:
        if self._frames:
            for frame in self._frames:
                frame.update(deps)

    @contextmanager
    def frame(self) -> Iterator[set[Dep]]:
        deps: set[Dep] = set()
        self._frames.append(deps)
        try:
            yield deps
        finally:
            self._frames.pop()
            # what was noted inside was noted in the outer frames too (note() adds to all)

    def memo(self, table: dict[Hashable, tuple[T, frozenset[Dep]]], key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()` once per key; a reuse notes the dependencies of the first computation."""
        hit = table.get(key)
        if hit is not None:
            value, deps = hit
            self.note_all(deps)
            return value
        with self.frame() as deps:
            value = compute()
        table[key] = (value, frozenset(deps))
        return value
