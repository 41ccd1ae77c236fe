"""Real English text that needs no download, for ``bench.py --mode train --workload lm``.

The corpus is the Python documentation as Debian ships it in package ``python3.11-doc``
(HTML under ``/usr/share/doc/python3.11/html``; the Python Software Foundation License,
``/usr/share/doc/python3.11-doc/copyright``): prose about programming, with the code
examples left out. Any other directory of HTML files can stand in for it (the tests use a
tiny one).

* **Text**: every ``*.html`` file under the root, in sorted order of relative path, except
  the generated indexes (``genindex*``, ``py-modindex``, ``search``); the standard library's
  ``html.parser`` keeps the text of the page's ``role="main"`` element (the whole body if
  there is none), leaves out ``<head>``, ``<script>``, ``<style>``, ``<pre>`` (code) and
  Sphinx's navigation and ``¶`` anchors, and ends a paragraph at every block element.
* **Split**: by document, fixed: a file is in the validation split when the CRC-32 of its
  relative path is 0 modulo 20 (about 5% of the files), else in the training split.
* **Tokens**: words, lower-cased (``[^\\W\\d_]+`` with inner apostrophes), digit runs, and
  every other non-space character alone; ``<eos>`` ends each paragraph.
* **Vocabulary**: built from the training split alone: id 0 is ``<unk>``, 1 ``<eos>``, then
  every training token by falling count (ties in code point order); :func:`load_corpus`
  keeps the ``vocab_size`` first ids and maps the others (and every validation token never
  seen in training) to ``<unk>``.

Parsing takes seconds, so the token ids are cached (``$NETSTORM_CACHE``, else
``$XDG_CACHE_HOME/netstorm``, else ``~/.cache/netstorm``) under a name that hashes every
file's path, size and modification time: the benchmark parses once, its workers read the
cache. A missing corpus is a :class:`~netstorm.datasets.DatasetError` that says which
package to install and how.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from .datasets import DatasetError

__all__ = ["Corpus", "DEFAULT_SOURCE", "EOS", "FORMAT", "PACKAGE", "SOURCE_NAME", "UNK",
           "build_vocabulary", "cache_dir", "contiguous_shard", "html_files", "html_to_text",
           "is_validation", "load_corpus", "read_corpus", "tokenize", "windows"]

PACKAGE = "python3.11-doc"
DEFAULT_SOURCE = "/usr/share/doc/python3.11/html"
SOURCE_NAME = "python-docs"     # what --data says for DEFAULT_SOURCE
UNK, EOS = "<unk>", "<eos>"
FORMAT = 1                      # of the cache files: bump when parsing or tokenizing changes
VALIDATION_MODULUS = 20
SKIPPED_FILES = ("genindex", "py-modindex", "search")
SKIPPED_TAGS = {"head", "script", "style", "pre", "title"}
SKIPPED_CLASSES = {"headerlink", "sphinxsidebar", "related", "footer", "highlight"}
BLOCK_TAGS = {"p", "div", "section", "li", "dt", "dd", "tr", "td", "th", "table", "ul", "ol",
              "dl", "blockquote", "caption", "h1", "h2", "h3", "h4", "h5", "h6", "br", "hr"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
             "source", "track", "wbr"}
TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|\d+|_|[^\w\s]")


@dataclass(frozen=True)
class Corpus:
    """Token ids of both splits (``int32``) and the vocabulary (``vocab[id]``)."""

    name: str
    train: np.ndarray
    valid: np.ndarray
    vocab: tuple
    files: int          # HTML files read (both splits)


class _Text(HTMLParser):
    """Collects the text of one page as paragraphs (see the module docstring)."""

    def __init__(self, main_only: bool):
        super().__init__(convert_charrefs=True)
        self.main_only = main_only
        self.stack: list = []         # (tag, skipped, in main) of the open elements
        self.paragraphs: list = []
        self.words: list = []

    def _state(self):
        return self.stack[-1][1:] if self.stack else (False, not self.main_only)

    def _break(self):
        if self.words:
            self.paragraphs.append(" ".join(self.words))
            self.words = []

    def handle_starttag(self, tag, attrs):
        if tag in BLOCK_TAGS:
            self._break()
        if tag in VOID_TAGS:
            return
        attrs = dict(attrs)
        skipped, main = self._state()
        classes = set((attrs.get("class") or "").split())
        skipped = skipped or tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES)
        self.stack.append((tag, skipped, main or attrs.get("role") == "main"))

    def handle_startendtag(self, tag, attrs):
        if tag in BLOCK_TAGS:
            self._break()

    def handle_endtag(self, tag):
        if tag in BLOCK_TAGS:
            self._break()
        if any(open_tag == tag for open_tag, *_ in self.stack):     # else a stray end tag
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data):
        skipped, main = self._state()
        if main and not skipped:
            self.words.extend(data.split())

    def text(self) -> str:
        self._break()
        return "\n".join(self.paragraphs)


def html_to_text(html: str) -> str:
    """One page's prose, a paragraph a line (see the module docstring)."""
    parser = _Text(main_only=bool(re.search(r"""role\s*=\s*["']?main\b""", html)))
    parser.feed(html)
    parser.close()
    return parser.text()


def tokenize(text: str) -> list:
    """The tokens of ``text`` (lines are paragraphs): lower-cased words, digit runs, single
    other characters, ``<eos>`` after every non-empty paragraph."""
    tokens = []
    for line in text.lower().split("\n"):
        words = TOKEN.findall(line)
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


def html_files(root: str) -> list:
    """The pages of the corpus: relative paths of ``*.html`` under ``root``, sorted, the
    generated indexes left out."""
    base = Path(root)
    return sorted(str(p.relative_to(base)) for p in base.rglob("*.html")
                  if p.is_file() and not p.name.startswith(SKIPPED_FILES))


def is_validation(relpath: str) -> bool:
    """Whether a page belongs to the validation split (fixed by its path)."""
    return zlib.crc32(relpath.encode()) % VALIDATION_MODULUS == 0


def build_vocabulary(tokens) -> tuple:
    """``<unk>``, ``<eos>``, then every other token of ``tokens`` by falling count, ties in
    code point order."""
    counts = Counter(tokens)
    counts.pop(UNK, None)
    counts.pop(EOS, None)
    return (UNK, EOS, *sorted(counts, key=lambda t: (-counts[t], t)))


def cache_dir() -> Path:
    """Where processed corpora are kept (see the module docstring)."""
    if os.environ.get("NETSTORM_CACHE"):
        return Path(os.environ["NETSTORM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "netstorm"


def _source(spec: str | None) -> tuple:
    """(name, root directory) of ``--data``: None or ``python-docs`` (the Debian package's
    HTML) or a directory of HTML files."""
    if spec in (None, SOURCE_NAME):
        if not os.path.isdir(DEFAULT_SOURCE):
            raise DatasetError(
                f"the lm workload trains on the Python documentation from Debian's package "
                f"{PACKAGE} ({DEFAULT_SOURCE}), which is not installed; install it with: "
                f"apt-get install -y {PACKAGE}")
        return SOURCE_NAME, DEFAULT_SOURCE
    if not os.path.isdir(spec):
        raise DatasetError(f"text data {spec!r} is neither {SOURCE_NAME!r} nor a directory "
                           f"of HTML files")
    return os.path.basename(os.path.normpath(spec)), spec


def _fingerprint(root: str, files: list) -> str:
    digest = hashlib.sha256(f"{FORMAT}\0{os.path.abspath(root)}".encode())
    for rel in files:
        st = os.stat(os.path.join(root, rel))
        digest.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def read_corpus(root: str, files: list) -> tuple:
    """Parse and tokenize every page: (training ids, validation ids, vocabulary), ids over
    the whole training vocabulary (before any ``vocab_size``)."""
    splits: dict = {False: [], True: []}
    for rel in files:
        raw = Path(root, rel).read_bytes().decode("utf-8", "replace")
        splits[is_validation(rel)].extend(tokenize(html_to_text(raw)))
    vocab = build_vocabulary(splits[False])
    index = {token: i for i, token in enumerate(vocab)}
    def ids(tokens):
        return np.fromiter((index.get(t, 0) for t in tokens), dtype=np.int32,
                           count=len(tokens))
    return ids(splits[False]), ids(splits[True]), vocab


def _cached(root: str, files: list, where: Path) -> tuple:
    path = where / f"corpus-{_fingerprint(root, files)}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            return z["train"], z["valid"], tuple(json.loads(str(z["vocab"])))
    except (OSError, KeyError, ValueError):
        pass                                # not cached yet (or a torn file): build it
    train, valid, vocab = read_corpus(root, files)
    buffer = io.BytesIO()
    np.savez(buffer, train=train, valid=valid, vocab=np.array(json.dumps(vocab)))
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".corpus-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
        os.replace(tmp, path)               # atomic: concurrent readers see all or nothing
    except OSError:
        pass                                # an unwritable cache only costs time
    return train, valid, vocab


def load_corpus(spec: str | None = None, vocab_size: int = 8192,
                cache: str | os.PathLike | None = None) -> Corpus:
    """The corpus ``spec`` names (``python-docs``, the default, or a directory of HTML),
    tokenized, its vocabulary cut to ``vocab_size`` ids (the rest become ``<unk>``)."""
    if vocab_size < 3:
        raise DatasetError(f"a vocabulary needs at least 3 ids (<unk>, <eos>, a word), "
                           f"got {vocab_size}")
    name, root = _source(spec)
    files = html_files(root)
    if not files:
        raise DatasetError(f"{root}: no HTML files")
    train, valid, vocab = _cached(root, files, Path(cache) if cache else cache_dir())
    if not len(train) or not len(valid):
        raise DatasetError(f"{root}: the training or the validation split has no text "
                           f"({len(train)} and {len(valid)} tokens)")
    train = np.where(train < vocab_size, train, 0).astype(np.int32)
    valid = np.where(valid < vocab_size, valid, 0).astype(np.int32)
    return Corpus(name, train, valid, vocab[:vocab_size], len(files))


def contiguous_shard(ids: np.ndarray, rank: int, num_workers: int) -> np.ndarray:
    """Worker ``rank``'s contiguous part of a token stream, every part the same length."""
    n = len(ids) // num_workers
    return ids[rank * n:(rank + 1) * n]


def windows(ids: np.ndarray, seq_len: int) -> np.ndarray:
    """Non-overlapping ``(N, seq_len + 1)`` windows of a stream (input: ``[:, :-1]``,
    target: ``[:, 1:]``; consecutive windows share one token)."""
    n = (len(ids) - 1) // seq_len
    if n < 1:
        return np.zeros((0, seq_len + 1), dtype=ids.dtype)
    index = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return ids[index]
