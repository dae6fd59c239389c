"""Counting prompt tokens: the provider's own tokenizer where one is installed, a stated
approximation otherwise.

* OpenAI's models are counted with ``tiktoken`` (the encoding of the model, ``o200k_base`` for a
  name it does not know). tiktoken downloads its encoding files on first use; where it cannot,
  the copies shipped in the ``bpe-openai`` package are put in tiktoken's cache after checking
  the SHA-256 tiktoken expects.
* Every other model, and OpenAI's when tiktoken is not installed, is counted by
  :data:`APPROXIMATION`: one token per three ASCII characters and one per other character.
  GPT-4o's and Llama-family tokenizers average 3.7 to 4.3 characters per token on schema text
  and take at least one token per character or two of Chinese or Japanese, so the approximation
  errs on the side of a shorter prompt.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

CHARS_PER_TOKEN = 3.0
APPROXIMATION = "approximate (1 token per 3 ASCII characters, 1 per other character)"
MESSAGE_OVERHEAD = 4
"""Tokens a chat format adds around each message (role and separators)."""

_ENCODING_FILES = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_lock = threading.Lock()
_encodings: dict[str, object] = {}


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of a text.

    Attributes:
        name: which tokenizer (an encoding's name, or :data:`APPROXIMATION`).
        count: the number of tokens of a text.
    """

    name: str
    count: Callable[[str], int]

    def count_messages(self, texts: Iterable[str]) -> int:
        """Tokens of a chat prompt made of ``texts``, one message each."""
        return sum(self.count(text) + MESSAGE_OVERHEAD for text in texts)


def approximate_tokens(text: str) -> int:
    """:data:`APPROXIMATION`'s count of ``text``."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / CHARS_PER_TOKEN) + (len(text) - ascii_chars)


APPROXIMATE = TokenCounter(APPROXIMATION, approximate_tokens)


def tiktoken_counter(model_name: str | None = None) -> TokenCounter | None:
    """A counter with tiktoken's encoding for ``model_name`` (``o200k_base`` for a model it does
    not know), or None when tiktoken is not installed or has no encoding file."""
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        name = tiktoken.encoding_name_for_model(model_name or "")
    except KeyError:
        name = "o200k_base"
    encoding = _encoding(name)
    if encoding is None:
        return None
    return TokenCounter(f"tiktoken {name}", lambda text: len(encoding.encode(text, disallowed_special=())))


def _encoding(name: str):
    with _lock:
        if name not in _encodings:
            _encodings[name] = _load_encoding(name)
        return _encodings[name]


def _load_encoding(name: str):
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception:  # no network: seed tiktoken's cache from the shipped copy below
        pass
    if not _seed_cache(name):
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception:
        return None


def _seed_cache(name: str) -> bool:
    """Put bpe-openai's copy of encoding ``name`` where tiktoken looks for its download."""
    expected = _ENCODING_FILES.get(name)
    if expected is None:
        return False
    try:
        from importlib import resources

        raw = gzip.decompress(resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes())
    except (ImportError, FileNotFoundError, OSError):
        return False
    if hashlib.sha256(raw).hexdigest() != expected:
        return False
    # tiktoken's own choice of cache folder (tiktoken.load.read_file_cached)
    folder = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if folder is None:
        folder = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not folder:
        return False
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        target = Path(folder, hashlib.sha1(_URL.format(name=name).encode()).hexdigest())
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(raw)
        os.replace(tmp, target)
    except OSError:
        return False
    return True
