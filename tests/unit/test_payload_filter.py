"""`payload:` in the one filter grammar (console/core/filters.py): what a term asks, how it is
written back, what is bad input, and that nothing typed reaches the JSON path's syntax -- the path
is built from parsed steps and compared with variables (tests/db/test_payload_filter.py runs it)."""

from __future__ import annotations

import json
import random
import string

import pytest

from console.core.filters import (
    KEYS,
    PAYLOAD_GRAMMAR,
    PAYLOAD_MAX_CHARS,
    JobFilter,
    PayloadTerm,
    grammar,
    memory_filter,
    parse_filter,
    parse_payload,
    parse_selection,
    split_terms,
)
from console.shared.errors import EXIT_BAD_INPUT, BadInput


def term(text: str) -> PayloadTerm:
    found = parse_filter(text).payload_term
    assert found is not None
    return found


@pytest.mark.parametrize(("text", "path", "variables"), [
    ("payload:$.invoice=INV-7", '$."invoice" ? (@ == $v)', {"v": "INV-7"}),
    ("payload:$.customer.name=Ada", '$."customer"."name" ? (@ == $v)', {"v": "Ada"}),
    ("payload:$.lines[0].sku=A-1", '$."lines"[0]."sku" ? (@ == $v)', {"v": "A-1"}),
    ("payload:$.x-request-id=r-1", '$."x-request-id" ? (@ == $v)', {"v": "r-1"}),
    ("payload:$.amount=120", '$."amount" ? (@ == $v || @ == $n)', {"v": "120", "n": 120}),
    ("payload:$.amount=-1.5e3", '$."amount" ? (@ == $v || @ == $n)', {"v": "-1.5e3", "n": -1500.0}),
    ("payload:$.vip=true", '$."vip" ? (@ == $v || @ == $n)', {"v": "true", "n": True}),
    ("payload:$.note=null", '$."note" ? (@ == $v || @ == $n)', {"v": "null", "n": None}),
    ('payload:$.amount="120"', '$."amount" ? (@ == $v)', {"v": "120"}),
    ('payload:$.name="Ada Lovelace"', '$."name" ? (@ == $v)', {"v": "Ada Lovelace"}),
    ('payload:$.q="say \\"hi\\""', '$."q" ? (@ == $v)', {"v": 'say "hi"'}),
    ('payload:$.q=""', '$."q" ? (@ == $v)', {"v": ""}),
    ("payload:$.a=b=c", '$."a" ? (@ == $v)', {"v": "b=c"}),
    ("payload:$.invoice", '$."invoice"', {}),
    ("payload:$.lines[12]", '$."lines"[12]', {}),
])
def test_a_path_term_is_a_jsonpath_and_its_variables(text, path, variables):
    found = term(text)
    assert found.text is None
    assert found.jsonpath() == path
    assert json.loads(found.variables() or "") == variables
    values = parse_filter(text).sql_values()
    assert (values["payload_path"], json.loads(values["payload_vars"]), values["payload_text"]) == \
        (path, variables, None)


@pytest.mark.parametrize(("text", "wanted"), [
    ("payload:refund", "refund"),
    ("payload:INV-7", "INV-7"),
    ("payload:a=b", "a=b"),  # not a path: text with an equals sign in it
    ('payload:"late fee"', "late fee"),
    ('payload:"$5 off"', "$5 off"),  # quoted: text, even starting with $
    ('payload:"say \\"hi\\""', 'say "hi"'),
    ('payload:"back\\\\slash"', "back\\slash"),
    ('payload:"a\\nb"', "a\\nb"),  # any other backslash is itself
])
def test_a_text_term_is_text(text, wanted):
    found = term(text)
    assert (found.text, found.jsonpath(), found.variables()) == (wanted, None, None)
    values = parse_filter(text).sql_values()
    assert (values["payload_path"], values["payload_vars"], values["payload_text"]) == (None, None, wanted)


def test_only_an_unquoted_json_literal_also_matches_that_json_value():
    assert [term(f"payload:$.a={v}").literal for v in ("120", "0", "-0.5", "1E+2", "true", "false", "null")] == \
        ["120", "0", "-0.5", "1E+2", "true", "false", "null"]
    # not JSON numbers (or words): the string only
    assert [term(f"payload:$.a={v}").literal for v in ("0120", "1.", ".5", "+1", "1e9999", "True", "NULL", "12a",
                                                         "0x10", "NaN", "Infinity")] == [None] * 11
    assert term('payload:$.a="120"').literal is None and term('payload:$.a="true"').literal is None


@pytest.mark.parametrize("text", [
    "payload:$.invoice=INV-7", 'payload:"two  words"', 'payload:$.name="Ada Lovelace"', 'payload:$.q="a \\"b\\" c"',
    "payload:$.lines[0].sku", "payload:refund", 'payload:$.x=""',
])
def test_a_filter_with_payload_is_written_back_as_it_parses(text):
    chosen = parse_filter(f"tool:pay {text} state:failed")
    assert chosen.describe() == f"state:failed tool:pay {text}"
    assert parse_filter(chosen.describe()) == chosen, "describe() parses back to the same filter (saved views)"


def test_quotes_keep_white_space_in_a_payload_term_only():
    assert split_terms('tool:pay  payload:"two words"\tstate:failed') == ["tool:pay", 'payload:"two words"',
                                                                          "state:failed"]
    assert split_terms('payload:$.name="Ada  Lovelace" x') == ['payload:$.name="Ada  Lovelace"', "x"]
    # the other keys split as they always did: a quote is a character of their value
    assert split_terms('key:a"b c"') == ['key:a"b', 'c"']
    assert parse_filter('key:rep"ort').key_prefix == 'rep"ort'
    assert split_terms("  ") == []


@pytest.mark.parametrize(("text", "words"), [
    ("payload:", "nothing after 'payload:'"),
    ("payload:$", "name a key after $"),
    ("payload:$=1", "name a key after $"),
    ("payload:$.", "not a JSON path this filter takes at '.'"),
    ("payload:$invoice", "not a JSON path this filter takes at 'invoice'"),
    ("payload:$.a[x]", "not a JSON path this filter takes at '[x]'"),
    ("payload:$.a[-1]", "not a JSON path this filter takes at '[-1]'"),
    ("payload:$.a[1234567]", "not a JSON path this filter takes"),
    ("payload:$.a..b", "not a JSON path this filter takes at '..b'"),
    ("payload:$.a.*", "not a JSON path this filter takes at '.*'"),
    ("payload:$.a b", "not a JSON path"),  # (the space splits: '$.a' is a path, 'b' a bare word)
    ('payload:$."a"=1', "not a JSON path this filter takes"),
    ("payload:$.a=", "nothing after '='"),
    ('payload:$.a="x', "a quote is not closed"),
    ('payload:$.a="x"y', "quote the whole value"),
    ('payload:$.a=x"y"', "quote the whole value"),
    ('payload:"x', "a quote is not closed"),
    ('payload:"x"y', "quote the whole text"),
    ('payload:ab"c"', "quote the whole text"),
    ('payload:""', "the text is empty"),
    ("payload:" + "x" * (PAYLOAD_MAX_CHARS + 1), f"at most {PAYLOAD_MAX_CHARS} characters"),
    ("payload:$" + ".a" * 33, "a path of at most 32 steps"),
])
def test_a_bad_payload_term_is_bad_input_with_the_grammar(text, words):
    with pytest.raises(BadInput) as caught:
        parse_filter(f"tool:pay {text}")
    if text == "payload:$.a b":  # the bare word after the path is the error here
        assert "'b' is not a state" in str(caught.value)
        return
    assert words in str(caught.value)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.hint in (PAYLOAD_GRAMMAR, grammar())
    if text not in ("payload:",):  # nothing after the colon: every key says it with the key grammar
        assert caught.value.hint == PAYLOAD_GRAMMAR


def test_the_error_shows_the_term_made_visible_and_short():
    with pytest.raises(BadInput) as caught:
        parse_filter("payload:$.a\x1b]2;x\x07=1")
    assert "\x1b" not in str(caught.value) and "\\x1b" in str(caught.value)


def test_the_grammar_names_payload():
    assert "payload" in KEYS
    assert "payload:…" in grammar()


def test_nothing_typed_reaches_the_path_syntax():
    """Whatever the value (quotes, parentheses, `||`, `$`, backslashes, any character), the path is
    the fixed template of its steps and the value only a JSON string among the variables; keys are
    letters, digits, _ and -, each written as a JSON string."""
    rng = random.Random(7)
    alphabet = string.printable + 'éß€"\\$@?()|&!'
    for _ in range(2000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        if any(c.isspace() for c in value):
            value = value.replace(" ", "_").replace("\t", "_").replace("\n", "_").replace("\r", "_") \
                .replace("\x0b", "_").replace("\x0c", "_")
        quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        found = term(f"payload:$.a[3].b={quoted}")
        assert found.jsonpath() == '$."a"[3]."b" ? (@ == $v)'
        assert json.loads(found.variables() or "") == {"v": value}
    hostile = ['$.a")||(@=="x', "$.a?(@>0)", "$.a;drop", "$.a'--", "$.a[1]||true", "$.$"]
    for path in hostile:
        with pytest.raises(BadInput):
            parse_filter(f"payload:{path}=1")


def test_payload_merges_and_is_not_given_twice():
    assert parse_filter("tool:pay").merged(parse_filter("payload:x")).describe() == "tool:pay payload:x"
    assert parse_filter("payload:x payload:x").payload == "x"
    with pytest.raises(BadInput, match="given twice"):
        parse_filter("payload:x payload:y")
    with pytest.raises(BadInput, match="given twice"):
        parse_filter("payload:x").merged(parse_filter("payload:y"))


def test_an_action_may_select_by_payload_alone():
    chosen = parse_selection("payload:$.invoice=INV-7")
    assert not chosen.empty and chosen.describe() == "payload:$.invoice=INV-7"


def test_memory_refuses_payload_rather_than_guess():
    """Triage and Approvals filter in memory the calls they read (no payload): payload: is refused as it
    is typed there, and `matches` never answers for it (neither a guess of all nor of none)."""
    with pytest.raises(BadInput) as caught:
        memory_filter("state:running payload:$.invoice=INV-7", "Triage")
    assert "payload: is searched in the database" in str(caught.value) and "Triage" in str(caught.value)
    assert "Calls screen (2)" in str(caught.value)
    assert memory_filter("state:running tool:pay", "Approvals") == parse_filter("state:running tool:pay")
    with pytest.raises(BadInput, match="payload: is searched in the database"):
        JobFilter(payload="x").matches(None)  # type: ignore[arg-type]


def test_without_payload_the_statement_gets_nulls():
    values = parse_filter("tool:pay").sql_values()
    assert (values["payload_path"], values["payload_vars"], values["payload_text"]) == (None, None, None)


def test_a_term_is_validated_when_the_filter_is_made():
    with pytest.raises(ValueError, match="not a JSON path"):
        JobFilter(payload="$.a[")
    assert parse_payload("$.a") == PayloadTerm(steps=("a",))
