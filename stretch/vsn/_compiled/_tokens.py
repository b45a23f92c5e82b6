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

from stretch.model._byte_table import ByteTable, utf8_buffers
from stretch.operators.kernels._tokenize import split

__all__ = ["TokenTable"]


class TokenTable:
    """The tokens seen so far: each one's number and string.

    Not thread-safe: its owner (``KeyTable``) calls it under its lock.
    """

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._table = ByteTable()

    @classmethod
    def of(cls, strings: list[str]) -> TokenTable:
        """A table numbering ``strings`` (distinct) 0, 1, ... in their order."""
        table = cls()
        table.strings = list(strings)
        table._table.number_texts(pa.array(strings, pa.string()))
        return table

    @property
    def held_bytes(self) -> int:
        """What its tokens cost (``ByteTable.held_bytes``), not counting ``strings``."""
        return self._table.held_bytes

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
        data, offsets = utf8_buffers(texts)
        found, row_offsets = split(data, offsets, hashtags)
        before = self._table.numbers  # never retained: new tokens take the next numbers
        numbers = self._table.number(data, found)
        new = self._table.decoded(before, self._table.numbers)
        self.strings.extend(new)
        return numbers, row_offsets, new
