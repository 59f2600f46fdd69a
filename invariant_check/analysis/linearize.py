"""C3 linearization, the order Python gives a class's `__mro__`.

`c3_merge(sequences)` merges the linearizations of a class's bases and the list of the bases
themselves: it repeatedly takes the first head that is in no sequence's tail. It returns None
where Python raises `TypeError: Cannot create a consistent method resolution order` (a
duplicate base, or bases listed against the order their own MROs impose); the caller then
falls back to another order instead of failing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def c3_merge(sequences: Sequence[Sequence[K]]) -> list[K] | None:
    seqs = [list(s) for s in sequences if s]
    out: list[K] = []
    while seqs:
        # a key is "blocked" while some sequence still has it after its head
        tails: set[K] = set()
        for s in seqs:
            tails.update(s[1:])
        head = next((s[0] for s in seqs if s[0] not in tails), None)
        if head is None:
            return None  # every head must still come after something: no consistent order
        out.append(head)
        seqs = [s[1:] if s[0] == head else s for s in seqs]
        seqs = [s for s in seqs if s]
    return out


__all__ = ["c3_merge"]
