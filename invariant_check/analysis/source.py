"""One file's text, decoded once, with every line ending turned into `\\n`.

`ast` reports columns as UTF-8 byte offsets into a line; findings report 1-based character
columns, as editors do. Lines are numbered as the parser numbers them (a lone CR ends a line).
"""

from __future__ import annotations

import bisect
import codecs
import re
from dataclasses import dataclass, field
from itertools import accumulate

# PEP 263: a coding cookie on one of the first two lines.
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


class DecodeError(ValueError):
    """The bytes are not text in the encoding the file declares; the message names why."""


_ASCII: list = [None, ""]  # the bytes last decoded as ASCII, and their text
_SAME_AS_ASCII = frozenset({"utf-8", "utf8", "utf_8", "latin-1", "latin1", "iso-8859-1", "ascii", "us-ascii"})


def ascii_text(data: bytes) -> str:
    """`data.decode("ascii")`, the same string object for the same bytes object: a file's
    needs are asked first of its raw bytes, then of its source, and the answers computed
    for a text are kept by the identity of that text."""
    if _ASCII[0] is not data:
        _ASCII[0], _ASCII[1] = data, data.decode("ascii")
    return _ASCII[1]


def decode(data: bytes) -> str:
    """The text of a Python file, as the interpreter would read it, with `\\n` line endings."""
    encoding = "utf-8"
    if data.startswith(codecs.BOM_UTF8):
        data = data[3:]
    else:
        head = data.split(b"\n", 2)[:2]
        for line in head:
            m = _COOKIE.match(line)
            if m:
                encoding = m.group(1).decode("ascii", "replace")
                break
            if line.strip() and not line.lstrip().startswith(b"#"):
                break  # a cookie only counts before the first line of code
    if encoding.lower() in _SAME_AS_ASCII and b"\r" not in data and data.isascii():
        return ascii_text(data)
    try:
        text = data.decode(encoding)
    except LookupError:
        raise DecodeError(f"unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not valid {exc.encoding} (byte {exc.start})") from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


_TEXT: list = [None, None]  # the bytes last decoded for a prefilter question, and their text


def quick_text(data: bytes) -> str | None:
    """The text a prefilter's byte-level question is answered on: the file decoded as
    `decode` does (the same string object for the same bytes object, so the answers kept
    by text identity are shared); None when the bytes do not decode (then the answer is
    yes, and the parse reports the file)."""
    if _TEXT[0] is not data:
        try:
            text = decode(data)
        except DecodeError:
            text = None
        _TEXT[0], _TEXT[1] = data, text
    return _TEXT[1]


@dataclass
class Source:
    """A decoded module. `text` is what positions refer to."""

    path: str
    text: str
    _starts: list[int] | None = field(default=None, repr=False)

    @property
    def line_starts(self) -> list[int]:
        if self._starts is None:
            # each line's length plus its newline, summed in C
            lengths = map(len, self.text.split("\n")[:-1])
            self._starts = list(accumulate(map((1).__add__, lengths), initial=0))
        return self._starts

    def line_of(self, offset: int) -> int:
        """1-based line of a character offset."""
        return bisect.bisect_right(self.line_starts, offset)

    def line_text(self, line: int) -> str:
        starts = self.line_starts
        if line < 1 or line > len(starts):
            return ""
        start = starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def column(self, line: int, byte_col: int) -> int:
        """1-based character column of an `ast` (UTF-8 byte) column."""
        text = self.line_text(line)
        if text.isascii():
            return byte_col + 1
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1

    def segment(self, node) -> str:
        """The source of an `ast` node, whitespace collapsed to one line."""
        line, end_line = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        first = self.line_text(line).encode("utf-8")
        if end_line == line:
            raw = first[node.col_offset : node.end_col_offset].decode("utf-8", "replace")
        else:
            parts = [first[node.col_offset :].decode("utf-8", "replace")]
            for n in range(line + 1, end_line):
                parts.append(self.line_text(n))
            last = self.line_text(end_line).encode("utf-8")
            parts.append(last[: node.end_col_offset].decode("utf-8", "replace"))
            raw = "\n".join(parts)
        return one_line(raw)


def one_line(code: str, limit: int = 100) -> str:
    """Code shown inside a message: one line, brackets without inner padding, bounded."""
    text = " ".join(code.split())
    text = re.sub(r"([(\[{])\s+", r"\1", text)
    text = re.sub(r",?\s+([)\]}])", r"\1", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
