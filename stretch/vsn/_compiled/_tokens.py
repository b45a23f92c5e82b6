"""Tweets' tokens as numbers: ``str.split()`` and the hashtag filter over many rows at once.

``catalog.word_keys``, ``hashtag_keys`` and ``pairs`` split a tweet with Python's
``str.split()``. ``TokenTable.numbers`` does the same split over the bytes of an Arrow
string array (``stretch.operators.kernels._tokenize``: the same whitespace, every code
point ``str.isspace`` accepts and no other; ``tests/vsn/test_panes.py`` checks all of
them) and numbers each token by its bytes, in order of first appearance.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.operators.kernels._tokenize import FULL, number, reindex, split

__all__ = ["TokenTable"]


class TokenTable:
    """The tokens seen so far: each one's number and string.

    Not thread-safe: its owner (``KeyTable``) calls it under its lock.
    """

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._slots = np.full(1024, -1, dtype=np.int64)
        self._known = np.empty((3, 512), dtype=np.int64)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._used = np.zeros(2, dtype=np.int64)

    def numbers(
        self, texts: pa.Array, hashtags: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[str]]:
        """The tokens of ``texts`` (strings, no nulls) as numbers.

        Args:
            texts: The texts.
            hashtags: Keep only tokens ``#x`` with ``x`` not empty, as ``x``.

        Returns:
            The numbers, the row offsets (text r's are ``numbers[offsets[r]:offsets[r+1]]``)
            and the strings of the tokens numbered for the first time, in number order.

        """
        texts = texts.cast(pa.string())
        _, offsets_buffer, data_buffer = texts.buffers()
        assert offsets_buffer is not None
        offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[
            texts.offset : texts.offset + len(texts) + 1
        ].astype(np.int64)
        data = (
            np.frombuffer(data_buffer, dtype=np.uint8)
            if data_buffer is not None
            else np.empty(0, dtype=np.uint8)
        )
        found, row_offsets = split(data, offsets, hashtags)
        before = int(self._used[0])
        while True:
            numbers = number(data, found, self._slots, self._known, self._arena, self._used)
            if not (numbers.shape[0] == 1 and numbers[0] == FULL):
                break
            self._grow(int((found[1] - found[0]).sum()))
        known, arena = self._known, self._arena
        new = [
            bytes(arena[known[0, t] : known[1, t]]).decode("utf-8")
            for t in range(before, int(self._used[0]))
        ]
        self.strings.extend(new)
        return numbers, row_offsets, new

    def _grow(self, token_bytes: int) -> None:
        """Room for the next new token: twice the index and table, bytes for all of a call's.

        ``token_bytes`` (the bytes of every token of the call) bounds what the arena needs.
        """
        n, taken = int(self._used[0]), int(self._used[1])
        if taken + token_bytes > self._arena.shape[0]:
            arena = np.empty(max(2 * self._arena.shape[0], taken + token_bytes), np.uint8)
            arena[:taken] = self._arena[:taken]
            self._arena = arena
        if n == self._known.shape[1]:
            known = np.empty((3, 2 * n), np.int64)
            known[:, :n] = self._known[:, :n]
            self._known = known
        if 2 * (n + 1) > self._slots.shape[0]:
            self._slots = reindex(self._known, n, 2 * self._slots.shape[0])
