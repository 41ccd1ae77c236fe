"""netstorm.text_corpus: HTML to text, tokens, the fixed split, the vocabulary, the cache and
the shards (on tiny HTML written here, not on the Debian package)."""
import zlib

import numpy as np
import pytest

from netstorm import text_corpus as tc
from netstorm.datasets import DatasetError

PAGE = """<!DOCTYPE html><html><head><title>Skipped title</title>
<script>var skipped = 1;</script><style>p { color: red }</style></head>
<body><div class="related" role="navigation"><a href="x.html">Navigation</a></div>
<div class="body" role="main"><section id="s"><h1>The Title<a class="headerlink"
href="#s">&#182;</a></h1>
<p>First paragraph, with <em>inline</em> markup &amp; an entity.<br>After a break</p>
<div class="highlight"><pre>print("code is left out")</pre></div>
<ul><li><p>An item</p></li><li>Another item</li></ul><img src="x.png" alt="no">
<p>Don't split it's words; split 3.14 and os.path_join!</p></section></div>
<div class="footer">Footer text</div></body></html>"""

WORDS = ("the", "cat", "dog", "sat", "ran", "on", "under", "a", "mat", "table", "quickly")


def validation_name(i=0):
    """A page name the fixed split puts in the validation split."""
    return next(f"v{i}-{k}.html" for k in range(10_000)
                if zlib.crc32(f"v{i}-{k}.html".encode()) % 20 == 0)


def training_name(i):
    return next(f"t{i}-{k}.html" for k in range(10_000)
                if zlib.crc32(f"t{i}-{k}.html".encode()) % 20)


def write_corpus(root, pages=6, sentences=120, seed=0):
    """A tiny corpus of ``pages`` training pages and one validation page: sentences of a
    small grammar, so that a model can learn something from them."""
    rng = np.random.RandomState(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = [training_name(i) for i in range(pages)] + [validation_name()]
    for name in names:
        paragraphs = []
        for _ in range(sentences // 4):
            phrases = [f"{rng.choice(WORDS[:3])} {rng.choice(WORDS[3:5])} "
                       f"{rng.choice(WORDS[5:7])} {WORDS[7]} {rng.choice(WORDS[8:])}"
                       for _ in range(4)]
            paragraphs.append(f"<p>{'. '.join(phrases)}.</p>")
        (root / name).write_text(f"<html><body><div role='main'>{''.join(paragraphs)}"
                                 f"</div></body></html>")
    (root / "genindex-A.html").write_text("<p>index entries are left out</p>")
    return names


def cached_corpus(tmp_path, monkeypatch) -> str:
    """The directory of a tiny corpus (:func:`write_corpus`), cached under ``tmp_path``."""
    monkeypatch.setenv("NETSTORM_CACHE", str(tmp_path / "cache"))
    write_corpus(tmp_path / "html")
    return str(tmp_path / "html")


def test_html_to_text_keeps_the_main_prose_a_paragraph_a_line():
    text = tc.html_to_text(PAGE)
    assert text.splitlines() == [
        "The Title", "First paragraph, with inline markup & an entity.", "After a break",
        "An item", "Another item", "Don't split it's words; split 3.14 and os.path_join!"]
    assert tc.html_to_text("<html><body><p>No main</p><script>x</script>here</body>"
                           "</html>").splitlines() == ["No main", "here"]
    assert tc.html_to_text("<p>stray</b> end tags</i> are ignored</p>") == \
        "stray end tags are ignored"


def test_tokens_are_lowercase_words_digit_runs_and_single_symbols_with_eos():
    tokens = tc.tokenize("Don't split it's words; split 3.14 and os.path_join!\n\nNext")
    assert tokens == ["don't", "split", "it's", "words", ";", "split", "3", ".", "14", "and",
                      "os", ".", "path", "_", "join", "!", tc.EOS, "next", tc.EOS]
    assert tc.tokenize("") == [] and tc.tokenize("Élan vital") == ["élan", "vital", tc.EOS]


def test_the_vocabulary_is_unk_eos_then_by_count_ties_in_code_point_order():
    assert tc.build_vocabulary(["b", "a", "c", "a", tc.EOS, "b", "a", tc.UNK]) == \
        (tc.UNK, tc.EOS, "a", "b", "c")


def test_the_split_is_by_file_and_fixed(tmp_path):
    names = write_corpus(tmp_path)
    files = tc.html_files(str(tmp_path))
    assert files == sorted(names)                   # sorted, the index page left out
    assert [f for f in files if tc.is_validation(f)] == [validation_name()]
    assert tc.is_validation("library/os.html") == (zlib.crc32(b"library/os.html") % 20 == 0)


def test_load_corpus_builds_the_vocabulary_from_training_and_caches_the_ids(tmp_path,
                                                                           monkeypatch):
    write_corpus(tmp_path / "html")
    (tmp_path / "html" / validation_name()).write_text(
        "<div role='main'><p>the zebra sat</p></div>")
    corpus = tc.load_corpus(str(tmp_path / "html"), cache=tmp_path / "cache")
    # <unk>, <eos>, the grammar's 11 words and '.': 'zebra' was never seen in training
    assert corpus.name == "html" and corpus.files == 7 and len(corpus.vocab) == 14
    assert corpus.vocab[:4] == (tc.UNK, tc.EOS, ".", "a")    # as frequent: code point order
    assert [corpus.vocab[i] for i in corpus.valid] == ["the", tc.UNK, "sat", tc.EOS]
    assert corpus.train.dtype == np.int32 and (corpus.train > 0).all()
    assert len(list((tmp_path / "cache").glob("corpus-*.npz"))) == 1

    def parse_again(*_):
        raise AssertionError("parsed although cached")
    monkeypatch.setattr(tc, "read_corpus", parse_again)
    small = tc.load_corpus(str(tmp_path / "html"), vocab_size=6, cache=tmp_path / "cache")
    assert small.vocab == corpus.vocab[:6]          # the rarer words become <unk>
    assert np.array_equal(small.train, np.where(corpus.train < 6, corpus.train, 0))
    assert (small.train == 0).any()
    monkeypatch.setenv("NETSTORM_CACHE", str(tmp_path / "elsewhere"))
    assert tc.cache_dir() == tmp_path / "elsewhere"


def test_a_changed_page_is_parsed_again(tmp_path):
    write_corpus(tmp_path / "html")
    first = tc.load_corpus(str(tmp_path / "html"), cache=tmp_path / "cache")
    (tmp_path / "html" / validation_name()).write_text("<p>only this now</p>")
    second = tc.load_corpus(str(tmp_path / "html"), cache=tmp_path / "cache")
    assert len(second.valid) == 4 != len(first.valid)
    assert len(list((tmp_path / "cache").glob("corpus-*.npz"))) == 2


def test_missing_or_empty_corpora_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(tc, "DEFAULT_SOURCE", str(tmp_path / "absent"))
    with pytest.raises(DatasetError, match="python3.11-doc.*apt-get install -y python3.11-doc"):
        tc.load_corpus("python-docs")
    with pytest.raises(DatasetError, match="neither 'python-docs' nor a directory"):
        tc.load_corpus(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no HTML files"):
        tc.load_corpus(str(tmp_path / "empty"))
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / training_name(0)).write_text("<p>only training text</p>")
    with pytest.raises(DatasetError, match="has no text"):
        tc.load_corpus(str(tmp_path / "one"), cache=tmp_path / "cache")
    with pytest.raises(DatasetError, match="at least 3 ids"):
        tc.load_corpus(str(tmp_path / "one"), vocab_size=2)


def test_shards_are_contiguous_equal_and_disjoint_and_windows_overlap_by_one():
    ids = np.arange(103)
    shards = [tc.contiguous_shard(ids, r, 4) for r in range(4)]
    assert [len(s) for s in shards] == [25] * 4
    assert np.array_equal(np.concatenate(shards), np.arange(100))
    w = tc.windows(np.arange(10), 3)
    assert w.tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert tc.windows(np.arange(3), 3).shape == (0, 4)
