"""The manifests' YAML writer: every document reads back equal with a real YAML reader,
strings YAML would take for something else stay strings, and equal input gives equal
bytes."""
from __future__ import annotations

import pytest
import yaml

from netstorm.deploy.yaml_text import dump, dump_all

TRICKY = ["yes", "No", "on", "OFF", "y", "true", "null", "~", "", " lead", "trail ", "1:20",
          "2001-12-14", "0o17", "0x1f", "1_000", "1e3", ".inf", ".nan", "-", "- x", "a: b",
          "#x", "x #y", "@at", "`tick", "'q'", '"dq"', "*alias", "&anchor", "!tag", "%pct",
          "[x]", "{x}", "a,b", "?", "|", ">", "ümlaut", "数据", "tab\there", "$(POD_IP)",
          "--", "-m", "9000", "3.5", "one\ntwo\n", "one\ntwo", "x\n\ny\n", "x\n\n",
          "\n", "  indented\nx\n", "x\n  indented\n", "cr\r\nlf", "bell\x07"]


@pytest.mark.parametrize("text", TRICKY)
def test_a_string_reads_back_as_that_string(text):
    doc = {"k": text, "list": [text, {"k": text}], text or "empty": 1}
    assert yaml.safe_load(dump(doc)) == doc


def test_nested_documents_read_back_equal_and_in_order():
    docs = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {}},
             "spec": {"ports": [{"port": 9000, "name": "z"}], "clusterIP": "None",
                      "flag": True, "off": False, "none": None, "empty": []}},
            {"kind": "ConfigMap", "data": {"cluster.toml": "[scheduler]\nport = 9000\n"}},
            {"nested": [[1, 2], [], [{"a": [{"b": {"c": "d"}}]}]]}]
    text = dump_all(docs, "made by a test\nsecond line")
    assert text.startswith("# made by a test\n# second line\n---\n")
    assert list(yaml.safe_load_all(text)) == docs
    assert [list(d) for d in yaml.safe_load_all(text)] == [list(d) for d in docs]
    assert dump_all(docs, "made by a test\nsecond line") == text


def test_text_of_several_lines_is_a_literal_block():
    assert dump({"f": "a = 1\nb = 2\n"}) == "f: |\n  a = 1\n  b = 2\n"


def test_what_a_manifest_never_holds_is_refused():
    with pytest.raises(TypeError):
        dump({"x": 1.5})
    with pytest.raises(TypeError):
        dump({1: "x"})


def test_lines_indented_deeper_than_the_first_stay_a_literal_block():
    text = "link = [\n    { a = 1 },\n]\n"
    assert dump({"f": text}) == "f: |\n  link = [\n      { a = 1 },\n  ]\n"
    assert yaml.safe_load(dump({"f": text})) == {"f": text}
