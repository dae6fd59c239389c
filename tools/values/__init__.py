"""A value index: find the database values a question refers to, typos included, at any size.

CHASE-SQL and CHESS look question keywords up in a MinHash LSH index over every text value of the
database, then re-rank the candidates by edit distance. CHESS builds that index with one datasketch
``MinHash`` object per value (3-grams, 100 permutations) and a ``MinHashLSH`` at threshold 0.01,
which means 100 bands of one row: every value sharing one min-hash with a keyword is a candidate,
and the whole structure lives in Python dicts that are pickled to disk. That is why it costs minutes
and gigabytes. This index keeps the idea, adds a lookup that cannot miss a one-edit typo, and
changes the machinery:

* **Four lookups, one posting table.** Every distinct value is reachable by 64-bit keys of four
  kinds: its whole normalised form (case folded, accents and punctuation removed: the exact
  lookup); each word of a multi-word value (so ``York`` finds ``New York``); the two halves of
  the value and of each of its words (the one-edit lookup); and the bands of its MinHash
  signature (the LSH lookup).
* **One-edit lookup (pigeonhole halves).** A token of length ``L`` is keyed by its first
  ``L // 2`` characters and, separately, by the rest, each key tagged with ``L`` and the side. One
  insertion, deletion or substitution leaves one half intact, at the start or at the end of the
  typed word, so the keyword's keys for token lengths ``n - 1``, ``n`` and ``n + 1`` find every
  token within one edit, whatever its 3-grams: ``cjat`` finds ``cat``, ``NhY`` finds ``NY`` and
  ``Wiard`` finds ``Ward``, whose padded 3-gram Jaccard similarities (0.17, 0, 0.29) MinHash
  rarely catches; ``dSummer`` finds ``Summer Show`` through its word. Two keys per token, six per
  keyword.
* **MinHash LSH**, computed in bulk with numpy, for what lies further than one edit
  (``European`` for ``Europe``, two typos in a long name): padded character 3-grams hashed from
  code points, permuted with datasketch's affine32 scheme (its MurmurHash3 pre-mix and its
  permutations for the seed). The signatures equal what ``datasketch.MinHash(hashfunc=
  shingle_hash32)`` produces value by value, and the band keys select the same candidates as
  ``datasketch.MinHashLSH(params=(b, r))`` over them (tests check both). 16 permutations in 8
  bands of 2 rows; the values with most band hits are kept, which ranks candidates by estimated
  Jaccard similarity instead of accepting everything above a threshold.
* **Keyword forms.** A keyword in the plural also looks up its singular (``cats``, ``catts``
  find ``cat``), a name of capitalised words its initials (``United Kingdom`` finds ``UK``;
  ``United States``, ``USA`` as one letter more), and several words their letters written
  together, exactly or within one edit (``North Carolina`` finds ``NorthCarolina``).
* **Column-name lookup.** Flags and codes (``IsOfficial`` = ``T``/``F``, ``Sex`` = ``F``/``M``)
  are rarely spelt in a question, which names the column instead (``official``, ``sex``): a
  keyword's word that is a word of the name of a column of at most :data:`FLAG_VALUES` distinct
  values, or within one edit of one, brings that column's values, scored :data:`FLAG_SCORE`.
  Each column's values have consecutive ids, so the column is a range of ids in the file.
* **Storage is one SQLite file** per database content, in a cache folder: the values, 32 to a
  row (``vals``), and the postings, each a 64-bit integer (the key's top 33 bits, then the value
  id), sorted and cut into buckets by their top bits (``post``: one row per bucket, a
  little-endian array). Nothing is unpickled, so a file from anywhere is safe to open. An index
  file of at most :data:`MEMORY_BYTES` (all but very large databases') is read whole at its
  first search, and a search then runs no statement; a larger one is searched in place, a
  search reading the few buckets its keys fall in and the value chunks of its candidates.
  Postings are made a batch of values at a time and spilled to scratch files by key range past
  :data:`SPILL_POSTINGS`, so memory stays flat whatever the database size. A key keeps at most
  :data:`MAX_POSTINGS` values. :data:`FORMAT_VERSION` is in the file's name and its ``meta``:
  an index of another format is rebuilt, never read.
* **Batches, not values.** Building and searching are a few array operations per batch: a
  batch of values is normalised in one pass over its joined text and keyed over its joined code
  points (:func:`normalize_many`, :func:`value_keys`); a search keys all its keywords at once,
  chooses every keyword's candidates in one pass over their postings, and scores all pairs of
  keyword and candidate with rapidfuzz's pairwise ``cpdist``. Reading goes through the guard
  (every statement parsed and checked), so it is done in few statements: a table's first rows,
  all columns at once, in one; a large column's distinct values a page (up to
  :data:`PAGE_BYTES`) a statement, joined into one string by SQLite.
* **Cost**: ``benchmarks/values.py`` measures the build against CHESS's settings on the same
  values in the same run (Spider dev, its largest database, synthetic tables), the recall of
  gold literals with and without one typo per keyword, what each lookup adds, how many values a
  search returns, and how long a search takes.
* **Why no FTS5 trigram table**: the index is queried through
  :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase` like every other database, and its
  authorizer refuses the ``sqlite_master`` access an FTS5 virtual table makes when it is
  connected.

* **A build in two halves**, so that it can run on many machines: the columns' parts (reading,
  normalising and keying each column's values: nearly all the time, and computable anywhere the
  database can be read, in any order) and their merge into the file, on one machine. The file
  holds nothing that differs between two builds (no time, no order from hashing or from which
  part came first), so a build from parts computed on a Ray cluster
  (:mod:`sqlchorus.cluster.index_build`) is the local build's file, byte for byte.

The modules, one concern each: :mod:`.parameters` (the settings), :mod:`.hashing` (normalisation
and keys), :mod:`.storage` (the index file's name and layout), :mod:`.reading` (which values are
indexed, and reading them), :mod:`.parts` (a column's values and keys, wherever they are
computed), :mod:`.building` (merging parts and writing the file), :mod:`.lookup` (a keyword's keys
and candidates), :mod:`.scoring` (scoring and ranking) and :mod:`.index` (:class:`ValueIndex`).
"""

from __future__ import annotations

from sqlchorus.tools.values.building import IndexWriter, ProgressFn, write_index
from sqlchorus.tools.values.hashing import (
    band_keys,
    half_keys,
    normalize,
    normalize_many,
    query_half_keys,
    shingle_hash32,
    shingles,
    signatures,
    string_keys,
    value_keys,
)
from sqlchorus.tools.values.index import IndexFormatError, PartsSource, ValueIndex
from sqlchorus.tools.values.lookup import acronym, singular
from sqlchorus.tools.values.parameters import (
    BANDS,
    BUCKET_POSTINGS,
    DEFAULT_MAX_VALUES,
    DEFAULT_THRESHOLD,
    EDIT_CANDIDATES,
    FLAG_SCORE,
    FLAG_VALUES,
    FORMAT_VERSION,
    FREE_TEXT_AVG_CHARS,
    HASH_BATCH,
    LSH_CANDIDATES,
    MAX_POSTINGS,
    MAX_VALUE_CHARS,
    MEMORY_BYTES,
    NUM_PERM,
    PAGE_BYTES,
    PAGE_SIZE,
    PARTITION_BITS,
    ROWS,
    SAMPLE_ROWS,
    SEED,
    SINGULAR_PENALTY,
    SPILL_POSTINGS,
    STOPWORDS,
    VALUES_PER_CHUNK,
    WORD_CANDIDATES,
)
from sqlchorus.tools.values.parts import (
    BuildPlan,
    ColumnPart,
    ValueBlock,
    column_part,
    plan_build,
    value_block,
)
from sqlchorus.tools.values.reading import ColumnPlan
from sqlchorus.tools.values.scoring import (
    Embedder,
    EmbedderError,
    load_local_embedder,
    score_value,
)
from sqlchorus.tools.values.storage import (
    content_fingerprint,
    database_fingerprint,
    default_cache_dir,
    index_path,
)

# Each module binds the settings it reads when it is imported: a setting changed at run time
# is changed on the module that reads it (lookup.EDIT_CANDIDATES, building.SPILL_POSTINGS,
# ...); changing it here changes nothing.
__all__ = [
    "BANDS",
    "BUCKET_POSTINGS",
    "DEFAULT_MAX_VALUES",
    "DEFAULT_THRESHOLD",
    "EDIT_CANDIDATES",
    "FLAG_SCORE",
    "FLAG_VALUES",
    "FORMAT_VERSION",
    "FREE_TEXT_AVG_CHARS",
    "HASH_BATCH",
    "LSH_CANDIDATES",
    "MAX_POSTINGS",
    "MAX_VALUE_CHARS",
    "MEMORY_BYTES",
    "NUM_PERM",
    "PAGE_BYTES",
    "PAGE_SIZE",
    "PARTITION_BITS",
    "ROWS",
    "SAMPLE_ROWS",
    "SEED",
    "SINGULAR_PENALTY",
    "SPILL_POSTINGS",
    "STOPWORDS",
    "VALUES_PER_CHUNK",
    "WORD_CANDIDATES",
    "BuildPlan",
    "ColumnPart",
    "ColumnPlan",
    "Embedder",
    "EmbedderError",
    "IndexFormatError",
    "IndexWriter",
    "PartsSource",
    "ProgressFn",
    "ValueBlock",
    "ValueIndex",
    "acronym",
    "band_keys",
    "column_part",
    "content_fingerprint",
    "database_fingerprint",
    "default_cache_dir",
    "half_keys",
    "index_path",
    "load_local_embedder",
    "normalize",
    "normalize_many",
    "plan_build",
    "query_half_keys",
    "score_value",
    "shingle_hash32",
    "shingles",
    "signatures",
    "singular",
    "string_keys",
    "value_block",
    "value_keys",
    "write_index",
]
