"""The one loader of input/expected fixture files, ``conftest.load_pairs``, on small inputs."""

from __future__ import annotations

import textwrap

import pytest

from conftest import Pair, load_pairs


def pairs_of(tmp_path, text: str) -> list[Pair]:
    path = tmp_path / "cases.txt"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return load_pairs(path)


def test_header_meta_input_and_expected(tmp_path):
    pairs = pairs_of(tmp_path, """
        -- A comment about the file,
        -- on two lines.

        -- case: first
        -- kind: refused
        -- db_2: concert_singer
        SELECT 1
        -- expected
        one

        -- case: second
        SELECT 2
        -- expected
        two
    """)
    assert pairs == [
        Pair(name="first", meta={"kind": "refused", "db_2": "concert_singer"},
             input="SELECT 1", expected="one"),
        Pair(name="second", meta={}, input="SELECT 2", expected="two"),
    ]


def test_meta_lines_only_right_after_the_case_line(tmp_path):
    (pair,) = pairs_of(tmp_path, """
        -- case: late meta
        SELECT 1
        -- kind: not meta here
        -- Kind: nor here
        -- expected
        -- kind: nor in the expected part
    """)
    assert pair.meta == {}
    assert pair.input == "SELECT 1\n-- kind: not meta here\n-- Kind: nor here"
    assert pair.expected == "-- kind: nor in the expected part"


def test_a_line_that_is_not_a_meta_line_starts_the_input(tmp_path):
    (pair,) = pairs_of(tmp_path, """
        -- case: comment input
        -- key: value
        -- a comment, not a meta line
        -- other: line
    """)
    assert pair.meta == {"key": "value"}
    assert pair.input == "-- a comment, not a meta line\n-- other: line"
    assert pair.expected is None


def test_missing_expected_is_none(tmp_path):
    pairs = pairs_of(tmp_path, """
        -- case: no expected
        Both candidates look fine.

        -- case: at the end of the file
        A or B
    """)
    assert [(p.name, p.input, p.expected) for p in pairs] == [
        ("no expected", "Both candidates look fine.", None),
        ("at the end of the file", "A or B", None),
    ]


def test_empty_expected_and_empty_input_and_empty_name(tmp_path):
    pairs = pairs_of(tmp_path, """
        -- case: empty expected
        text
        -- expected

        -- case:
        -- expected
        not_a_query

        -- case: nothing at all
    """)
    assert [(p.name, p.input, p.expected) for p in pairs] == [
        ("empty expected", "text", ""),
        ("", "", "not_a_query"),
        ("nothing at all", "", None),
    ]


def test_multi_line_input_keeps_inner_lines_and_drops_trailing_blank_ones(tmp_path):
    path = tmp_path / "cases.txt"
    path.write_text(
        "-- case: multi-line\n**Step 1:**\n  indented line\n\n**Final SQL:**\n"
        "SELECT name\nFROM singer\n\n  \n"
        "-- expected\nSELECT name\n\nFROM singer\n\n   \n\n",
        encoding="utf-8",
    )
    (pair,) = load_pairs(path)
    assert pair.input == "**Step 1:**\n  indented line\n\n**Final SQL:**\nSELECT name\nFROM singer"
    assert pair.expected == "SELECT name\n\nFROM singer"


def test_leading_blank_lines_are_kept(tmp_path):
    (pair,) = pairs_of(tmp_path, """
        -- case: leading blank

        text
    """)
    assert pair.input == "\ntext"


def test_only_an_exact_expected_line_ends_the_input(tmp_path):
    (pair,) = pairs_of(tmp_path, """
        -- case: look-alikes
        --- expected
        -- expected:x
        -- expected
        value
    """)
    assert pair.input == "--- expected\n-- expected:x"
    assert pair.expected == "value"


@pytest.mark.parametrize(
    "text,message",
    [
        ("SELECT 1\n-- case: x\nSELECT 1\n", "before the first '-- case:' line"),
        ("-- comment\n  # note\n-- case: x\nSELECT 1\n", "before the first '-- case:' line"),
        ("-- case: x\nSELECT 1\n-- expected\na\n-- expected\nb\n", "second '-- expected'"),
        ("-- case: x\n-- expected\n-- expected\n", "second '-- expected'"),
        ("-- case: x\n-- kind: a\n-- kind: b\nSELECT 1\n", "meta key 'kind' given twice"),
        ("-- only a comment\n\n", "no case"),
        ("", "no case"),
    ],
    ids=["text before first case", "non-comment header line", "duplicate expected",
         "duplicate expected, empty", "duplicate meta key", "only a comment", "empty file"],
)
def test_malformed_files_raise(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as raised:
        load_pairs(path)
    assert str(path) in str(raised.value)
