"""The worker's result channel: authenticated JSON lines on a dedicated pipe.

The parent creates the pipe and a random key, hands the worker the write end and, on stdin, the
key. Each message carries a sequence number and an HMAC over it, so text a candidate writes to
stdout is never read as a result, and bytes it writes into the pipe are detected as forged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from typing import Any

MAX_LINE_BYTES = 1 << 20


class ForgedMessage(Exception):
    """The channel carried bytes the worker's writer did not produce."""


def new_key() -> str:
    return secrets.token_hex(32)


def _mac(key: str, seq: int, body: str) -> str:
    return hmac.new(bytes.fromhex(key), f"{seq}:{body}".encode(), hashlib.sha256).hexdigest()


class ChannelWriter:
    """Worker side. Writes are small (< PIPE_BUF is not guaranteed, so one write call per line)."""

    def __init__(self, fd: int, key: str) -> None:
        self._fd = fd
        self._key = key
        self._seq = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, sort_keys=True, separators=(",", ":"))
        line = json.dumps({"seq": self._seq, "body": body, "mac": _mac(self._key, self._seq, body)}) + "\n"
        data = line.encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        self._seq += 1


class ChannelReader:
    """Parent side. Feed it bytes as they arrive; it yields verified messages in order."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._seq = 0
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            messages.append(self._verify(line))
        if len(self._buffer) > MAX_LINE_BYTES:
            raise ForgedMessage("an unterminated line of over 1 MiB arrived on the result channel")
        return messages

    def finish(self) -> None:
        """Call at end of stream: a partial line means something else wrote to the channel."""
        if self._buffer.strip():
            raise ForgedMessage("the result channel ended with a partial line the harness did not write")

    def _verify(self, line: bytes) -> dict[str, Any]:
        try:
            envelope = json.loads(line)
            seq, body, mac = envelope["seq"], envelope["body"], envelope["mac"]
        except (ValueError, KeyError, TypeError):
            raise ForgedMessage(f"unreadable line on the result channel: {line[:80]!r}") from None
        if not isinstance(seq, int) or not isinstance(body, str) or not isinstance(mac, str):
            raise ForgedMessage("malformed envelope on the result channel")
        if not hmac.compare_digest(mac, _mac(self._key, seq, body)):
            raise ForgedMessage(f"message {seq} on the result channel fails authentication")
        if seq != self._seq:
            raise ForgedMessage(f"result message {seq} arrived where {self._seq} was expected (replayed or dropped)")
        self._seq += 1
        return json.loads(body)
