"""The one text rule (corpus.text_rules): cleaning, normalisation, names, terminal escapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.corpus import text_rules as T
from workbench.errors import WorkbenchError

NASTY = ["\x00", "\x07", "\x1b", "\x7f", "\x9b", "\u202e", "\u2066", "\ufeff", "\ud800", "\udfff"]


def test_clean_text_removes_and_counts_control_and_invisible_characters() -> None:
    assert T.clean_and_count("a\x07b\x1b[31mc") == ("ab[31mc", 2)
    assert T.clean_and_count("\ufeffabc\u202edef\u202c") == ("abcdef", 3)
    assert T.clean_and_count("x\x00y\ud800z") == ("xyz", 2)
    assert T.clean_and_count("a\tb\nc\r\nd\x1fe\x85f") == ("a b c d e f", 0)  # whitespace controls
    assert T.clean_and_count("e\x00\u0301") == ("\u00e9", 1)  # NFC after removal
    assert T.clean_and_count("\u200b\u200d \u2060") == ("", 3)  # zero-width only: empty
    family = "\U0001f468\u200d\U0001f469"  # ZWJ inside text is meaningful: kept
    assert T.clean_and_count(family) == (family, 0)
    assert T.normalize_text("  a\t b\n\u3000c  ") == "a b c"


@given(st.text(alphabet=st.characters() | st.sampled_from([*NASTY, "\u200b", " ", "\t"])))
def test_cleaned_text_is_stable_storable_and_printable_safe(raw: str) -> None:
    clean, removed = T.clean_and_count(raw)
    assert T.clean_and_count(clean) == (clean, 0)  # idempotent
    clean.encode("utf-8")  # no lone surrogates: every database stores it
    assert not any(ch in clean for ch in NASTY)
    assert "\t" not in clean and "\n" not in clean and clean == clean.strip()
    assert removed <= len(raw)


def test_escape_controls_makes_terminal_output_inert() -> None:
    assert T.escape_controls("v\x1b[2Jx\u202eyz\x00") == "v\\x1b[2Jx\\u202eyz\\x00"
    assert T.escape_controls("a\udcffb\x9b") == "a\\udcffb\\x9b"
    assert T.escape_controls("中文 ok") == "中文 ok"
    assert T.escape_controls("\x1b\x9b", json=True) == "\\u001b\\u009b"


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("evil\x1b[2J", "control or invisible"),
        ("nul\x00", "control or invisible"),
        ("abc\u202etxt.exe", "control or invisible"),
        ("\ufeffbom", "control or invisible"),
        ("\u200b", "empty"),
        ("x" * 201, "longer"),
        ("12", "would read as an id"),
        ("#12", "would read as an id"),
        ("ID:7", "would read as an id"),
        (12, "must be text"),
    ],
)
def test_one_name_rule(name: object, match: str) -> None:
    with pytest.raises(WorkbenchError, match=match):
        T.validate_name(name, "version name")


def test_valid_names_are_normalised() -> None:
    assert T.validate_name("  my\tcorpus  2024 ") == "my corpus 2024"
    assert T.validate_name("v12 (fine-tuned)") == "v12 (fine-tuned)"
    assert T.explicit_id("#12") == 12 and T.explicit_id("id:3") == 3 and T.explicit_id("12") is None
