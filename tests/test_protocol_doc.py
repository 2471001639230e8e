"""protocol.md and the code that speaks it stay one contract: every message type, field,
error code, end reason and close code of the native wire (sections 1 to 8) is in both,
with the same meaning where the document pairs them (an error's close code, an end
reason's close code). Pure: no server, no weights."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from parley.protocol import messages
from parley.protocol.errors import CloseCode, ErrorCode
from parley.protocol.messages import (
    ControlType,
    EndReason,
    FinalReason,
    FinalWarning,
    ServerMessage,
    Word,
)

DOC = (Path(__file__).resolve().parents[1] / "protocol.md").read_text()
NATIVE = DOC.split("\n## 9.")[0]  # sections 1-8: the native wire; 9 on are other wires'


def section(number: str) -> str:
    """The text of ``## <number>.`` up to the next section of that level."""
    match = re.search(rf"^## {re.escape(number)}\. .*?(?=^## |\Z)", DOC, re.S | re.M)
    assert match, f"protocol.md has no section {number}"
    return match.group(0)


def table_rows(text: str) -> list[list[str]]:
    """A markdown table's body rows, each as its stripped cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[1:]  # the header row


def ticked(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"expected one `name` in {cell!r}"
    return match.group(1)


SERVER_CLASSES = typing.get_args(ServerMessage)


def type_of(cls: type) -> str:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "type")


def doc_examples() -> dict[str, dict]:
    """Each message type's first JSON example in the native sections, parsed (an
    elided list item, ``, …]``, read as the end of the list)."""
    examples: dict[str, dict] = {}
    for block in re.findall(r"```json\n(.*?)```", NATIVE, re.S):
        data = json.loads(re.sub(r",\s*…\s*\]", "]", block))
        examples.setdefault(data["type"], data)
    return examples


def test_every_message_type_is_in_both():
    documented = set(re.findall(r'"type":\s*"([a-z_]+)"', NATIVE))
    server = {type_of(cls) for cls in SERVER_CLASSES}
    client = {c.value for c in ControlType}
    assert server | client == documented
    assert not server & client


@pytest.mark.parametrize("cls", SERVER_CLASSES, ids=type_of)
def test_every_field_is_in_both(cls):
    """An example's keys are the message's fields; a field an example leaves out (it is
    absent when empty, or belongs to another section's feature) is named in the text."""
    fields = {f.name for f in dataclasses.fields(cls)} | {"seq"}  # seq: section 6a
    if cls is messages.Error:
        fields.add("fatal")  # derived from the code, written by as_json
    example = doc_examples().get(type_of(cls))
    if example is not None:
        assert set(example) <= fields, f"documented but not in {cls.__name__}"
    for name in fields - set(example or {}):
        assert re.search(rf'`{name}`|"{name}"', DOC), f"{cls.__name__}.{name} is not documented"


def test_word_fields_are_the_documented_ones():
    final = doc_examples()["final"]
    assert {f.name for f in dataclasses.fields(Word)} == set(final["words"][0])


def test_error_codes_and_their_close_codes():
    rows = table_rows(section("4"))
    documented = {ticked(code): (fatal, close) for code, fatal, close, _ in rows}
    assert set(documented) == {c.value for c in ErrorCode}
    for code in ErrorCode:
        fatal, close = documented[code.value]
        assert (fatal == "yes") == (code.close_code is not None), code
        assert close == (str(int(code.close_code)) if code.close_code else ""), code


def test_close_codes():
    documented = {int(code) for code, _ in table_rows(section("5"))}
    assert documented == {int(c) for c in CloseCode}


def test_end_reasons_and_their_close_codes():
    ended = NATIVE.split("### `session_ended`")[1].split("### ")[0]
    documented = {ticked(reason): int(close) for reason, _, close in table_rows(ended)}
    assert documented == {r.value: int(r.close_code) for r in EndReason}


@pytest.mark.parametrize("value", [*FinalReason, *FinalWarning], ids=lambda v: v.value)
def test_final_reasons_and_warnings_are_documented(value):
    assert f"`{value.value}`" in NATIVE


def test_every_path_the_server_answers_on_is_in_protocol_md():
    from parley.protocol import paths

    named = {
        name: value.pattern if isinstance(value, re.Pattern) else value
        for name, value in vars(paths).items()
        if name.endswith("_PATH")
    }
    assert len(named) >= 12
    for name, path in named.items():
        literal = path if not path.startswith("^") else "/v1/sessions/"
        assert literal in DOC, f"protocol.md never names {name} ({literal})"


def test_recording_error_codes_and_statuses():
    """Section 16's table of HTTP errors is the recordings' (and model listing's) codes,
    each with its status."""
    from parley.transport.upload_errors import STATUS, UploadCode

    errors = section("16").split("### Limits and errors")[1]
    documented = {ticked(code): int(status) for status, code, _ in table_rows(errors)}
    assert documented == {code.value: STATUS[code] for code in UploadCode}
