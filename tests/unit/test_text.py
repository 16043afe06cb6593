"""The one sanitizer and the terminal boundary (console/shared/text.py)."""

from __future__ import annotations

import unicodedata

import pytest

from console.shared.text import MARKER, sanitize, terminal_safe

HOSTILE = "\x1b]52;c;UFdORUQ=\x07\x1b]2;PWNED-TITLE\x07\x1b[31mred\x1b[0m w-\u202egnp.exe zw\u200bsp\u2028\ufeff\udcff"


def invisible(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") and c != "\n"]


def test_every_hostile_character_becomes_visible():
    shown = sanitize(HOSTILE)
    assert not invisible(shown)
    for visible in ("\\x1b]52;c;UFdORUQ=\\x07", "\\x1b]2;PWNED-TITLE\\x07", "\\x1b[31m", "w-\\u202egnp.exe",
                    "zw\\u200bsp", "\\u2028", "\\ufeff", "\\udcff"):
        assert visible in shown, visible


def test_printable_text_is_untouched_and_markup_is_not_special():
    for text in ("w-search-1", "payment:inv-7:capture", "[bold red]x[/]", "Ärger über Öl", "付款", "🙂"):
        assert sanitize(text) == text


def test_lines_and_bounds():
    assert sanitize("a\nb\tc\rd") == "a\\nb c\\rd"
    assert sanitize("a\nb", single_line=False) == "a\nb"
    assert sanitize(None) == "" and sanitize(42) == "42"
    assert sanitize("x" * 100, max_chars=10) == "x" * 10 + f"{MARKER}(+90 chars)"
    assert sanitize("\u00a0nbsp") == " nbsp", "other white space is a plain space"


def test_terminal_safe_drops_only_what_has_no_width():
    from rich.cells import cell_len

    dropped = terminal_safe(HOSTILE)
    assert not invisible(dropped)
    assert cell_len(dropped) == cell_len(HOSTILE.replace("\udcff", "")), "the layout computed before stays right"
    assert terminal_safe("a\nb") == "a\nb" and terminal_safe("plain") == "plain"


@pytest.mark.parametrize("code", [0x07, 0x1b, 0x7f, 0x9b, 0x200e, 0x202e, 0x2066, 0x2069, 0x061c, 0xfeff, 0xe0001])
def test_each_class_of_invisible_character(code):
    char = chr(code)
    assert char not in sanitize(f"a{char}b") and char not in terminal_safe(f"a{char}b")
