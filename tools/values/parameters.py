"""The value index's settings: file format, hashing, reading, building and lookup bounds.

:data:`FORMAT_VERSION` and the hashing settings (:data:`NUM_PERM`, :data:`BANDS`,
:data:`MAX_VALUE_CHARS`) are part of every index file's name, so changing one of them makes the
index of each database be built anew instead of reusing one that hashes differently.
"""

from __future__ import annotations

FORMAT_VERSION = 2
NUM_PERM = 16
BANDS = 8
ROWS = NUM_PERM // BANDS
SEED = 1
MAX_VALUE_CHARS = 200
FREE_TEXT_AVG_CHARS = 80
SAMPLE_ROWS = 1000
PAGE_SIZE = 100_000
HASH_BATCH = 16_384
VALUES_PER_CHUNK = 64
"""Values per row of the ``vals`` table (:data:`HASH_BATCH` is a multiple of it)."""
LSH_CANDIDATES = 50
"""Values kept per keyword from the LSH lookup, those with most band hits first."""
WORD_CANDIDATES = 200
"""Values kept per keyword from the word lookup."""
EDIT_CANDIDATES = 300
"""Values kept per keyword from the one-edit lookup (0 turns it off)."""
MAX_POSTINGS = 1000
"""Values kept per key when the index is built (the first in value order)."""
BUCKET_POSTINGS = 256
"""Postings per bucket of the ``post`` table, on average."""
SPILL_POSTINGS = 2_000_000
"""Postings held in memory while building before they are spilled to scratch files."""
PARTITION_BITS = 4
SINGULAR_PENALTY = 2.0
"""How much lower a match of a plural keyword's singular scores than the same match of the
keyword itself."""
DEFAULT_THRESHOLD = 80.0
DEFAULT_MAX_VALUES = 100_000

STOPWORDS = frozenset(
    """a an and are as at be by did do does for from had has have how i in is it its list me
    many much name names of on or show than that the their them there these they this those
    to was were what when where which who whom whose why with all any each give find tell
    return number count""".split()
)
