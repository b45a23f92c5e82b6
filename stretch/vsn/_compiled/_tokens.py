"""The tokens of tweets in Arrow: ``str.split()`` and the hashtag filter, for many rows at once.

``catalog.word_keys``, ``hashtag_keys`` and ``pairs`` split a tweet with Python's
``str.split()``. Arrow's ``utf8_split_whitespace`` splits on the same characters (every
code point Python's ``str.isspace`` accepts and no other; ``tests/vsn`` checks all of
them), but keeps an empty string where a text starts or ends with whitespace, or is
empty; those are dropped here. Splitting a run of rows in Arrow costs a fraction of a
Python loop over them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

__all__ = ["split_tokens"]


def split_tokens(texts: pa.Array, hashtags: bool) -> tuple[pa.Array, NDArray[np.int64]]:
    """The tokens of each text, in order: all of them, or its hashtags without the ``#``.

    Args:
        texts: Strings (no nulls).
        hashtags: Keep only tokens ``#x`` with ``x`` not empty, as ``x``
            (``catalog.hashtag_keys``, before repeats are dropped).

    Returns:
        The tokens, and row offsets: text r's tokens are ``tokens[offsets[r]:offsets[r+1]]``.

    """
    lists = pc.utf8_split_whitespace(texts)
    values = lists.values.slice(lists.offsets[0].as_py())  # a sliced list array's values
    bounds: NDArray[np.int64] = np.asarray(lists.offsets, dtype=np.int64)
    per_text = bounds[1:] - bounds[:-1]
    row = np.repeat(np.arange(len(texts), dtype=np.int64), per_text)
    length = np.asarray(pc.binary_length(values), dtype=np.int64)
    if hashtags:
        keep = (length > 1) & np.asarray(pc.starts_with(values, "#"), dtype=np.bool_)
        values = pc.utf8_slice_codeunits(values.filter(pa.array(keep)), 1)
    else:
        keep = length > 0
        values = values.filter(pa.array(keep))
    counts = np.bincount(row[keep], minlength=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return values, offsets
