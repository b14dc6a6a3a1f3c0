"""An event stream read block by block: the text of a stream in, its whole blocks out (each an
event, or a comment such as the service's heartbeat), so that the clients can bound the time
between two of them. No I/O here."""

from __future__ import annotations

import re

from httpx_sse import ServerSentEvent

_LINE_END = re.compile(r"\r\n|\r|\n")


class Blocks:
    """The blocks of an event stream, as its text arrives in pieces. A block is one or more lines
    ended by a blank line; a blank line that ends no line is no block (a peer cannot keep a
    stream alive with line ends alone). The fields are read as ``httpx-sse`` reads them."""

    def __init__(self) -> None:
        self._line = ""
        """The text of the line not yet ended."""
        self._after_cr = False
        """The last piece ended with ``\\r``: a ``\\n`` that begins the next ends no line."""
        self._lines = 0
        """Lines of the block not yet ended."""
        self._event = ""
        self._data: list[str] = []
        self._id = ""
        self._retry: int | None = None

    def feed(self, text: str) -> list[ServerSentEvent | None]:
        """The blocks ``text`` ends, in order: an event, or ``None`` for a block that is none
        (comments only)."""
        if not text:
            # An empty piece between a ``\r`` and its ``\n`` changes nothing.
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        ended: list[ServerSentEvent | None] = []
        start = 0
        for end in _LINE_END.finditer(text):
            line = self._line + text[start : end.start()]
            self._line = ""
            start = end.end()
            if end.group() == "\r" and start == len(text):
                self._after_cr = True
            if line:
                self._lines += 1
                self._field(line)
            elif self._lines > 0:
                self._lines = 0
                ended.append(self._dispatch())
        self._line += text[start:]
        return ended

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            try:
                self._retry = int(value)
            except ValueError:
                pass

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._event and not self._data and not self._id and self._retry is None:
            return None
        event = ServerSentEvent(event=self._event, data="\n".join(self._data), id=self._id, retry=self._retry)
        # As the spec says (and httpx-sse does), the last event id stays.
        self._event, self._data, self._retry = "", [], None
        return event
