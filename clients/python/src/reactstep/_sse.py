"""An event stream read block by block: the bytes of a stream in, its whole blocks out (each an
event, or a comment such as the service's heartbeat), so that the clients can bound the time
between two of them, and the size of a line and of an event's data. No I/O here."""

from __future__ import annotations

import re

from httpx_sse import ServerSentEvent

MAX_SIZE = 16 * 1024 * 1024
"""The longest line, and the longest data of one event, in bytes: past it the stream is not read
further (a peer cannot make the client hold an unbounded line in memory)."""

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class TooLong(Exception):
    """A line, or an event's data, longer than ``MAX_SIZE``: the stream cannot be read on."""


def _size(count: int) -> str:
    mib = 1024 * 1024
    return f"{count // mib} MiB" if count % mib == 0 else f"{count} bytes"


class Blocks:
    """The blocks of an event stream, as its bytes arrive in pieces. A block is one or more lines
    ended by a blank line; a blank line that ends no line is no block (a peer cannot keep a
    stream alive with line ends alone). The text is UTF-8 (as the SSE standard says; a byte
    order mark that begins the stream is dropped); the fields are read as ``httpx-sse`` reads
    them. The pieces of a line not yet ended are kept apart and joined once, when it ends, so
    that a long line in many pieces costs its length, not its length times the pieces."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        """The pieces of the line not yet ended."""
        self._length = 0
        """Their bytes in all."""
        self._after_cr = False
        """The last piece ended with ``\\r``: a ``\\n`` that begins the next ends no line."""
        self._first = True
        """No line has ended yet (the stream's byte order mark, if any, is still to drop)."""
        self._lines = 0
        """Lines of the block not yet ended."""
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0
        """The bytes of the event's data so far, the line ends between its lines included."""
        self._id = ""
        self._retry: int | None = None

    def feed(self, piece: bytes) -> list[ServerSentEvent | None]:
        """The blocks ``piece`` ends, in order: an event, or ``None`` for a block that is none
        (comments only). Raises ``TooLong`` for a line or an event's data past ``MAX_SIZE``."""
        if not piece:
            # An empty piece between a ``\r`` and its ``\n`` changes nothing.
            return []
        start = 1 if self._after_cr and piece.startswith(b"\n") else 0
        self._after_cr = False
        ended: list[ServerSentEvent | None] = []
        for end in _LINE_END.finditer(piece, start):
            self._keep(piece[start : end.start()])
            line = b"".join(self._pieces)
            self._pieces, self._length = [], 0
            start = end.end()
            if end.group() == b"\r" and start == len(piece):
                self._after_cr = True
            self._line(line, ended)
        self._keep(piece[start:])
        return ended

    def _keep(self, part: bytes) -> None:
        if not part:
            return
        self._length += len(part)
        if self._length > MAX_SIZE:
            raise TooLong(f"a line of the event stream is longer than {_size(MAX_SIZE)}")
        self._pieces.append(part)

    def _line(self, line: bytes, ended: list[ServerSentEvent | None]) -> None:
        if self._first:
            self._first = False
            line = line.removeprefix(_BOM)
        if line:
            self._lines += 1
            self._field(line)
        elif self._lines > 0:
            self._lines = 0
            ended.append(self._dispatch())

    def _field(self, line: bytes) -> None:
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"event":
            self._event = _text(value)
        elif name == b"data":
            self._data_size += len(value) + (1 if self._data else 0)
            if self._data_size > MAX_SIZE:
                raise TooLong(f"an event's data is longer than {_size(MAX_SIZE)}")
            self._data.append(_text(value))
        elif name == b"id":
            if b"\0" not in value:
                self._id = _text(value)
        elif name == b"retry":
            try:
                self._retry = int(_text(value))
            except ValueError:
                pass

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._event and not self._data and not self._id and self._retry is None:
            return None
        event = ServerSentEvent(event=self._event, data="\n".join(self._data), id=self._id, retry=self._retry)
        # As the spec says (and httpx-sse does), the last event id stays.
        self._event, self._data, self._data_size, self._retry = "", [], 0, None
        return event


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")
