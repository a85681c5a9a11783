"""``json_input.loads`` at the unit level: what it lets through unchanged, and what its 400 says.

tests/security/test_pathological_input.py checks that each pathology is a 400 on every surface;
here: the error's message and param, the limits' exact edges, and the look-alikes that pass.
"""

from __future__ import annotations

import json

import pytest

from memproxy.errors import ApiError
from memproxy.wire.json_input import BODY, MAX_DEPTH, loads


def refusal(raw: bytes | str, prefix: str = BODY) -> ApiError:
    with pytest.raises(ApiError) as err:
        loads(raw, prefix=prefix)
    assert err.value.status == 400 and err.value.code == "invalid_json"
    assert err.value.message.startswith(prefix)
    return err.value


def arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_ordinary_json_is_what_json_loads_gives_from_bytes_or_text() -> None:
    text = '{"model": "m", "messages": [{"role": "user", "content": "héllo 😀"}], "n": 1.5, "k": null}'
    assert loads(text.encode()) == json.loads(text) == loads(text)
    assert loads(b"\xef\xbb\xbf[1, 2]") == [1, 2]  # a UTF-8 BOM is ignored (RFC 8259)
    assert loads(b"-0.0") == 0.0 and loads(b"1e308") == 1e308
    assert loads("9" * 4000) == int("9" * 4000)  # long, but under int()'s digit limit


def test_the_nesting_limit_is_exact_and_brackets_in_strings_do_not_count() -> None:
    assert loads(arrays(MAX_DEPTH)) is not None
    assert "nested deeper than 64 levels" in refusal(arrays(MAX_DEPTH + 1)).message
    assert "nested deeper" in refusal(arrays(100_000)).message  # RecursionError inside json, too
    flat = json.dumps({"text": "[{" * 500, "list": [[1]] * 500})
    assert loads(flat)["text"] == "[{" * 500  # many brackets, two levels deep


def test_not_utf8_names_the_first_bad_byte() -> None:
    assert refusal(b'{"a": "caf\xe9"}').message == BODY + "it is not UTF-8 text (byte 10)."


def test_a_syntax_error_says_where() -> None:
    error = refusal(b'{"a": 1,\n "b": }')
    assert "(line 2, column 7)" in error.message and error.param is None
    refusal(b"")
    refusal(b'{"a": 1} trailing')


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_refused(literal: str) -> None:
    assert f"{literal} is not a JSON value" in refusal(f'{{"t": {literal}}}').message


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1" + "0" * 400 + ".0"])
def test_floats_beyond_range_are_refused_not_infinite(number: str) -> None:
    assert "is out of range" in refusal(f"[{number}]").message


def test_an_integer_over_the_digit_limit_is_a_400_not_a_value_error() -> None:
    error = refusal("9" * 5000)
    assert error.message.endswith(".") and ";" not in error.message


@pytest.mark.parametrize(
    ("raw", "param", "where"),
    [
        ('"\\ud800"', None, "the value"),
        ('{"user": "\\udc00"}', "user", "'user'"),
        (
            '{"messages": [{"role": "user"}, {"content": "hi \\ud83d"}]}',
            "messages[1].content",
            "'messages[1].content'",
        ),
        ('{"messages": [{"\\ud800": 1}]}', "messages[0]", "a key in 'messages[0]'"),
        ('{"\\ud800": 1}', None, "a key"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where_it_is(raw: str, param: str | None, where: str) -> None:
    error = refusal(raw)
    assert error.param == param
    assert (
        error.message
        == BODY + f"{where} holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape not in a pair)."
    )
    error.message.encode("utf-8")  # the message itself can be sent


def test_a_surrogate_pair_and_its_lookalikes_pass() -> None:
    assert loads('"\\ud83d\\ude00"') == "😀"  # an ASCII-only encoder's emoji
    assert loads('"\\\\ud800"') == "\\ud800"  # an escaped backslash: text, not a surrogate
    assert loads('"\\u00e9"') == "é"


def test_the_prefix_is_the_callers() -> None:
    error = refusal(b"{", prefix="not valid JSON: ")
    assert error.message.startswith("not valid JSON: ") and BODY not in error.message
