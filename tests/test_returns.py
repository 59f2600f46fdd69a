"""What a function returns once a statement of it has run (`analysis/returns.py`)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from invariant_check.analysis.returns import returned_after


def _at_switch(src: str) -> bool | None:
    func = ast.parse(textwrap.dedent(src)).body[0]
    call = next(n for n in ast.walk(func) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "set_skip_topk")
    return returned_after(func, call)


@pytest.mark.parametrize(
    "src, expected",
    [
        # says so right after
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            return True
        """, True),
        # after an early `return False` the switch's path returns True
        ("""
        def hook(self):
            if not self.share:
                return False
            self.model.set_skip_topk(True)
            return True
        """, True),
        # falls off the end: None
        ("""
        def hook(self):
            if self.share:
                self.model.set_skip_topk(True)
        """, False),
        # a later branch may say either
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            if self.n:
                return True
            return 0
        """, None),
        # a path that raises returns nothing
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            if self.broken:
                raise RuntimeError("no")
            return 1
        """, True),
        # inside the `if` the switch is under, then the code after that `if`
        ("""
        def hook(self):
            if self.share:
                self.model.set_skip_topk(True)
                log("on")
            return "on"
        """, True),
        # a value that cannot be told
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            return self.share
        """, None),
        # a loop around the switch: not read
        ("""
        def hook(self):
            for m in self.models:
                m.set_skip_topk(True)
            return True
        """, None),
        # a generator returns itself
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            yield
        """, None),
        # a loop after it that may return
        ("""
        def hook(self):
            self.model.set_skip_topk(True)
            for m in self.models:
                if m.bad:
                    return False
            return True
        """, None),
    ],
)
def test_returned_after_the_switch(src, expected):
    assert _at_switch(src) is expected
