"""The value index's settings: file format, hashing, reading, building and lookup bounds.

:data:`FORMAT_VERSION` and the hashing settings (:data:`NUM_PERM`, :data:`BANDS`,
:data:`MAX_VALUE_CHARS`) are part of every index file's name, so changing one of them makes the
index of each database be built anew instead of reusing one that hashes differently.
"""

from __future__ import annotations

FORMAT_VERSION = 3
"""3: columns record where their values start and their longest value (``cols.first_vid``,
``cols.max_chars``), for the column-name lookup."""
NUM_PERM = 16
BANDS = 8
ROWS = NUM_PERM // BANDS
SEED = 1
MAX_VALUE_CHARS = 200
FREE_TEXT_AVG_CHARS = 80
SAMPLE_ROWS = 1000
"""Rows of a table that decide how each of its columns is read (its sample): the first, all
columns at once; a table no larger is read whole."""
WHOLE_ROWS = 20_000
"""Rows of a SQLite table read in its first statement, all columns at once: a table no larger is
read whole. A larger table's column with no more text values is read whole in one statement
(joined), its distinct values then made here; a column of more is read by ``SELECT DISTINCT``
pages."""
PAGE_SIZE = 1_000_000
"""Distinct values per statement at most when a column is read on its own (a large table's)."""
PAGE_BYTES = 4 * 1024 * 1024
"""Text per statement, about, when a column is read on its own: a page is read joined into one
string (see reading), which the guard caps at 8 MB, and each page of a column makes SQLite sort
what is left of it anew, so pages are as large as that cap allows, with room for a sample that
underestimates the values' length."""
HASH_BATCH = 2_048
"""Values stored and keyed at a time: small enough that the arrays of their keys stay in the
processor's cache, and that a build reuses the same memory batch after batch."""
VALUES_PER_CHUNK = 32
"""Values per row of the ``vals`` table (:data:`HASH_BATCH` is a multiple of it)."""
LSH_CANDIDATES = 50
"""Values kept per keyword from the LSH lookup, those with most band hits first."""
WORD_CANDIDATES = 100
"""Values kept per keyword from the word lookup."""
EDIT_CANDIDATES = 100
"""Values kept per keyword from the one-edit lookup (0 turns it off)."""
MAX_POSTINGS = 1000
"""Values kept per key when the index is built (the first in value order)."""
BUCKET_POSTINGS = 256
"""Postings per bucket of the ``post`` table, on average."""
MEMORY_BYTES = 32 * 1024 * 1024
"""Index files of at most this size are read into memory at their first search (all but very
large databases'): a search then reads no statement. Larger ones are read a few buckets and
value chunks a search, so memory stays flat."""
SPILL_POSTINGS = 2_000_000
"""Postings held in memory while building before they are spilled to scratch files."""
PARTITION_BITS = 4
SINGULAR_PENALTY = 2.0
"""How much lower a match of a plural keyword's singular scores than the same match of the
keyword itself."""
DEFAULT_THRESHOLD = 80.0
FLAG_VALUES = 4
"""Columns of at most this many distinct values, none longer than :data:`FLAG_CHARS`, are found
by their name (the column-name lookup): a question names the column (``official``, ``sex``), not
its values (``T``, ``F``)."""
FLAG_CHARS = 5
"""The longest value of a column found by its name. Flags and codes (``T``, ``N``, ``yes``,
``False``) are short; a column of a few longer values (``Medium``, ``Vaccination``) is found by
the question's own spelling. Without this bound, a small table whose every column has a few
distinct values (a sample database, a fixture) would have every column that a question's word
names brought into the schema view, with values nobody asked for."""
FLAG_SCORE = 80.0
"""The score of a value found by its column's name: the default threshold, below every value
matched by its own spelling."""
DEFAULT_MAX_VALUES = 100_000

STOPWORDS = frozenset(
    """a an and are as at be by did do does for from had has have how i in is it its list me
    many much name names of on or show than that the their them there these they this those
    to was were what when where which who whom whose why with all any each give find tell
    return number count""".split()
)
