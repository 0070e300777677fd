"""Reading an input file whose size is bounded before it is read.

A card, a cluster description or an ONNX file is read whole. Given ``/dev/zero``, a named pipe that never ends or
a sparse file of terabytes, a plain ``read()`` grew until the kernel killed the process (or raised MemoryError
deep inside a parser). :func:`read_bounded` refuses a regular file by its size before reading it, and anything
else (a pipe, a device) after ``limit`` bytes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: the largest card read (one holds a few hundred kB at most: every batch size's timings, notes and errors)
CARD_LIMIT_BYTES = 64 * 2**20
#: the largest cluster description read (a list of server groups: kilobytes)
CLUSTER_LIMIT_BYTES = 16 * 2**20
#: protobuf cannot parse a message over 2 GiB; an ONNX model's weights past that are external data
ONNX_LIMIT_BYTES = 2**31 - 1


class InputTooLarge(ValueError):
    """A file over the limit :func:`read_bounded` was given; its argument is the message."""


def read_bounded(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``; :class:`InputTooLarge` when there are more than ``limit`` of them (OSError as
    ``open`` raises it). ``what`` names the file in the message (``a card``)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode):
            if st.st_size > limit:
                raise InputTooLarge(f"the file holds {_mb(st.st_size)}: larger than {what} can be ({_mb(limit)})")
            # the size as stat gave it, plus one byte to see a file that grew since: read(limit + 1) would
            # allocate the whole limit (2 GiB for ONNX) before reading a 10 kB file
            data = f.read(st.st_size + 1)
            if len(data) <= st.st_size:
                return data
            data += _read_chunks(f, limit - len(data) + 1)
        else:
            data = _read_chunks(f, limit + 1)
    if len(data) > limit:
        raise InputTooLarge(f"over {_mb(limit)} read and more to come (a device or a pipe that does not end?): "
                            f"larger than {what} can be")
    return data


def _read_chunks(f, most: int) -> bytes:
    """Up to ``most`` bytes of ``f`` (until end of file), read a MiB at a time so memory follows the data."""
    parts: list[bytes] = []
    while most > 0:
        part = f.read(min(_CHUNK, most))
        if not part:
            break
        parts.append(part)
        most -= len(part)
    return b"".join(parts)


_CHUNK = 2**20


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


__all__ = ["CARD_LIMIT_BYTES", "CLUSTER_LIMIT_BYTES", "ONNX_LIMIT_BYTES", "InputTooLarge", "read_bounded"]
