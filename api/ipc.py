"""Arrow IPC streams read within a decoded-size limit, checked before anything is decoded.

A compressed stream (LZ4 or ZSTD buffers) can decode to thousands of times its size. The
size each record or dictionary batch decodes to is written in the stream: the message's
flatbuffer metadata lists its body buffers, and each compressed buffer starts with its
uncompressed length (Arrow's columnar format, "Compression"). ``decoded_size`` adds those
up reading only the metadata and 8 bytes per buffer, so a stream too large when decoded is
refused before it is allocated.
"""

from __future__ import annotations

import struct

import pyarrow as pa

__all__ = ["decoded_size"]

_RECORD_BATCH = "record batch"
_DICTIONARY_BATCH = "dictionary batch"
_MESSAGE_HEADER = 2
"""Message.header, the union value (flatbuffer field index)."""
_RECORD_BATCH_BUFFERS = 2
_RECORD_BATCH_COMPRESSION = 3
_DICTIONARY_DATA = 1
_BUFFER_STRUCT_BYTES = 16
_UNCOMPRESSED = -1


class _Table:
    """A flatbuffer table: just enough of the format to follow offsets and vectors."""

    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.position = position
        (back,) = struct.unpack_from("<i", data, position)
        self.vtable = position - back
        (self.vtable_bytes,) = struct.unpack_from("<H", data, self.vtable)

    @classmethod
    def root(cls, data: bytes) -> _Table:
        (offset,) = struct.unpack_from("<I", data, 0)
        return cls(data, offset)

    def _field(self, index: int) -> int | None:
        entry = 4 + 2 * index
        if entry >= self.vtable_bytes:
            return None
        (offset,) = struct.unpack_from("<H", self.data, self.vtable + entry)
        return self.position + offset if offset else None

    def _target(self, index: int) -> int | None:
        field = self._field(index)
        if field is None:
            return None
        offset: int = struct.unpack_from("<I", self.data, field)[0]
        return field + offset

    def table(self, index: int) -> _Table | None:
        target = self._target(index)
        return None if target is None else _Table(self.data, target)

    def structs(self, index: int, size: int) -> list[bytes]:
        target = self._target(index)
        if target is None:
            return []
        (count,) = struct.unpack_from("<I", self.data, target)
        start = target + 4
        if start + count * size > len(self.data):
            msg = "vector beyond the metadata"
            raise ValueError(msg)
        return [self.data[start + i * size : start + (i + 1) * size] for i in range(count)]

    def has(self, index: int) -> bool:
        return self._field(index) is not None


def _batch_size(batch: _Table, body: pa.Buffer) -> int:
    buffers = [
        struct.unpack("<qq", raw)
        for raw in batch.structs(_RECORD_BATCH_BUFFERS, _BUFFER_STRUCT_BYTES)
    ]
    if not batch.has(_RECORD_BATCH_COMPRESSION):
        return sum(length for _, length in buffers)
    total = 0
    for offset, length in buffers:
        if length == 0:
            continue
        if offset < 0 or length < 8 or offset + 8 > body.size:
            msg = "a compressed buffer lies outside the message body"
            raise ValueError(msg)
        (decoded,) = struct.unpack("<q", body.slice(offset, 8).to_pybytes())
        total += length - 8 if decoded == _UNCOMPRESSED else decoded
    return total


def decoded_size(body: bytes) -> int:
    """The bytes the record and dictionary batches of an Arrow IPC stream decode to.

    Reads the messages' metadata only (zero-copy over ``body``); O(messages + buffers).

    Raises:
        ValueError, OSError, pyarrow.ArrowException: ``body`` is not a well-formed
            Arrow IPC stream.

    """
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(body))
    total = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return total
        if message.type not in (_RECORD_BATCH, _DICTIONARY_BATCH):
            continue
        try:
            header = _Table.root(message.metadata.to_pybytes()).table(_MESSAGE_HEADER)
            if header is not None and message.type == _DICTIONARY_BATCH:
                header = header.table(_DICTIONARY_DATA)
        except struct.error as exc:
            msg = f"malformed message metadata: {exc}"
            raise ValueError(msg) from exc
        if header is None:
            msg = "a batch message without its header"
            raise ValueError(msg)
        try:
            total += _batch_size(header, message.body)
        except struct.error as exc:
            msg = f"malformed message metadata: {exc}"
            raise ValueError(msg) from exc
