"""The bare single-thread pane counter: wordcount over sliding windows, written plainly.

The best simple program for a windowed word count with WS / WA = k, and the baseline of
``bench_panes.py``. No runtime, one thread, one pass over the ``ts``-sorted tweets:

1. Tokenize (``tokenize``): Arrow splits every tweet on whitespace and numbers the
   tokens (``dictionary_encode``), the same split as ``str.split()``; a Numba loop drops
   a tweet's repeated words (a "last row seen" array indexed by word number).
   Tweets with one ts are first put in the order of their text, as the runtime does.
2. Count (``count``, Numba): time is cut into panes of ``g = gcd(WA, WS)`` ms; each of
   the ``WS / g`` live panes, in a ring, keeps its words in first-appearance order with
   a count and the first (row, index in the tweet) that had it, found through a dense
   word -> entry array. When the next tuple's ts passes a window's end, the window's
   panes are combined in order (a dense word -> row array again) and its rows are
   appended to the output in first-appearance order, which is the order of their
   causes, so no sort is needed.
3. The output table: ``ts`` (window end), ``key`` (the word's string, one Arrow
   ``take``), ``count``: the rows and order of ``stretch replay wordcount``.

``count`` alone (given the tokenized words) is the counter over pre-tokenized int keys;
``bench_panes.py`` times it separately too.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from numpy.typing import NDArray

__all__ = ["count", "tokenize", "wordcount"]


@njit(cache=True)
def _distinct(
    words: NDArray[np.int64], offsets: NDArray[np.int64], n_words: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each row's words without repeats (first kept), and the new row offsets."""
    last_row = np.full(n_words, -1, dtype=np.int64)
    out = np.empty(words.shape[0], dtype=np.int64)
    out_offsets = np.empty(offsets.shape[0], dtype=np.int64)
    out_offsets[0] = 0
    n = 0
    for r in range(offsets.shape[0] - 1):
        for p in range(offsets[r], offsets[r + 1]):
            w = words[p]
            if last_row[w] != r:
                last_row[w] = r
                out[n] = w
                n += 1
        out_offsets[r + 1] = n
    return out[:n], out_offsets


def tokenize(tweets: pa.Array) -> tuple[NDArray[np.int64], NDArray[np.int64], pa.Array]:
    """Every tweet's distinct words as numbers, the row offsets, and the words' strings."""
    lists = pc.utf8_split_whitespace(tweets)
    values = lists.values
    keep = np.asarray(pc.binary_length(values), dtype=np.int64) > 0  # ends, empty tweets
    row = np.repeat(np.arange(len(tweets)), np.diff(np.asarray(lists.offsets)))
    encoded = pc.dictionary_encode(values.filter(pa.array(keep)))
    offsets = np.zeros(len(tweets) + 1, dtype=np.int64)
    np.cumsum(np.bincount(row[keep], minlength=len(tweets)), out=offsets[1:])
    numbers = np.asarray(encoded.indices, dtype=np.int64)
    words, offsets = _distinct(numbers, offsets, len(encoded.dictionary))
    return words, offsets, encoded.dictionary


@njit(cache=True)
def _close(
    l: int,
    ws: int,
    g: int,
    p_start: NDArray[np.int64],
    p_size: NDArray[np.int64],
    p_word: NDArray[np.int64],
    p_count: NDArray[np.int64],
    w_row: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
) -> tuple[NDArray[np.int64], int]:
    """Append window ``[l, l + WS)``'s rows (end, word, count) to ``out`` from ``n_out``."""
    k = p_start.shape[0]
    first = n_out
    for q in range(l // g, (l + ws) // g):
        slot = q % k
        if p_start[slot] != q * g:
            continue  # no tuple in this pane
        for e in range(p_size[slot]):
            w = p_word[slot, e]
            r = w_row[w]
            if r < 0:
                if n_out == out.shape[1]:
                    out = np.concatenate((out, np.empty_like(out)), axis=1)
                w_row[w] = n_out
                out[0, n_out] = l + ws
                out[1, n_out] = w
                out[2, n_out] = p_count[slot, e]
                n_out += 1
            else:
                out[2, r] += p_count[slot, e]
    for r in range(first, n_out):
        w_row[out[1, r]] = -1
    return out, n_out


@njit(cache=True)
def count(
    ts: NDArray[np.int64],
    words: NDArray[np.int64],
    offsets: NDArray[np.int64],
    n_words: int,
    wa: int,
    ws: int,
    g: int,
) -> NDArray[np.int64]:
    """Sliding-window word counts over panes; returns rows (window end, word, count)."""
    k = ws // g  # panes per window, kept in a ring: pane q (start q * g) in slot q % k
    p_word = np.empty((k, 1024), dtype=np.int64)
    p_count = np.empty((k, 1024), dtype=np.int64)
    p_size = np.zeros(k, dtype=np.int64)
    p_start = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    p_entry = np.full((k, n_words), -1, dtype=np.int64)  # slot, word -> entry
    w_row = np.full(n_words, -1, dtype=np.int64)  # word -> its row in the window closing
    out = np.empty((3, 1024), dtype=np.int64)
    n_out = 0
    n = ts.shape[0]
    if n == 0:
        return out[:, :0]
    next_l = ((ts[0] - ws) // wa + 1) * wa  # the earliest window not out yet
    for i in range(n):
        q = ts[i] // g
        if next_l + ws <= ts[i]:  # windows end: close them (after a gap, from the first
            oldest = q * g  # one holding a live pane)
            for slot in range(k):
                if p_start[slot] >= next_l:
                    oldest = min(oldest, p_start[slot])
            next_l = max(next_l, ((oldest - ws) // wa + 1) * wa)
            while next_l + ws <= ts[i]:
                out, n_out = _close(
                    next_l, ws, g, p_start, p_size, p_word, p_count, w_row, out, n_out
                )
                next_l += wa
        slot = q % k
        if p_start[slot] != q * g:  # a new pane takes the slot of one no window needs
            for e in range(p_size[slot]):
                p_entry[slot, p_word[slot, e]] = -1
            p_size[slot] = 0
            p_start[slot] = q * g
        for p in range(offsets[i], offsets[i + 1]):
            w = words[p]
            e = p_entry[slot, w]
            if e < 0:
                e = p_size[slot]
                if e == p_word.shape[1]:
                    p_word = np.concatenate((p_word, np.empty_like(p_word)), axis=1)
                    p_count = np.concatenate((p_count, np.empty_like(p_count)), axis=1)
                p_entry[slot, w] = e
                p_word[slot, e] = w
                p_count[slot, e] = 0
                p_size[slot] = e + 1
            p_count[slot, e] += 1
    last = ts[n - 1] // g * g  # the input ends: every window holding the last pane closes
    while next_l <= last:
        out, n_out = _close(next_l, ws, g, p_start, p_size, p_word, p_count, w_row, out, n_out)
        next_l += wa
    return out[:, :n_out]


def wordcount(table: pa.Table, wa: int, ws: int) -> pa.Table:
    """Wordcount's output for ``table`` (``ts``-sorted tweets) with windows WA, WS.

    Tweets with one ts are taken in the order of their (user, tweet) strings, the order
    the runtime gives ties (docs/design.md decision 2), so causes and rows line up.
    """
    if np.any(np.diff(np.asarray(table.column("ts"))) == 0):
        keys = [("ts", "ascending"), ("user", "ascending"), ("tweet", "ascending")]
        table = table.take(pc.sort_indices(table, sort_keys=keys))
    words, offsets, strings = tokenize(table.column("tweet").combine_chunks())
    ts = np.asarray(table.column("ts"), dtype=np.int64)
    g = math.gcd(wa, ws)
    ends, word, counts = count(ts, words, offsets, len(strings), wa, ws, g)
    return pa.table({"ts": ends, "key": strings.take(word), "count": counts})
