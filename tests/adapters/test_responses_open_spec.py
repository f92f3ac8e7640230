"""Open Responses, what the compliance run turned up: an ``input_file`` part reaches a text model
as its text, over HTTP (JSON and SSE) and WebSocket, against the real server.

A PDF's text comes from its content streams (plain or Flate-compressed); a text file is read as
UTF-8. The prompt a file makes is checked through ``POST /v1/responses/input_tokens``: the same
count as the text the server promises to render (``<file name="...">`` ... ``</file>``, set apart by
a blank line), and not the count without the file. Files that give no text are a 400 in the
OpenAI error shape, naming the part.
"""

from __future__ import annotations

import base64
import json
import zlib

import httpx
import pytest
from websockets.sync.client import connect

from kvgate.models.embedded import EMBEDDED_MAX_OUTPUT_TOKENS
from tests.adapters.test_responses_render import check_event_stream, parse_sse
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
MODEL = {"model": "smollm2"}
SHORT = {**MODEL, "max_output_tokens": 8, "temperature": 0}
QUESTION = {"type": "input_text", "text": "Which fruit does the memo name?"}


def pdf(content: bytes, *, compress: bool = False) -> bytes:
    """A one-page PDF whose page shows ``content`` (a content stream), in Helvetica."""
    data = zlib.compress(content) if compress else content
    extra = b" /Filter /FlateDecode" if compress else b""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 200] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d%s >>\nstream\n" % (len(data), extra) + data + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    body = b"%PDF-1.4\n" + b"".join(b"%d 0 obj\n%s\nendobj\n" % (n, obj) for n, obj in enumerate(objects, 1))
    return body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def data_url(raw: bytes, media: str) -> str:
    return f"data:{media};base64,{base64.b64encode(raw).decode()}"


MEMO = pdf(b"BT /F1 14 Tf 40 150 Td (Memo for the kitchen) Tj 0 -20 Td (Buy three \\(3\\) mangoes) Tj ET")
MEMO_TEXT = "Memo for the kitchen\nBuy three (3) mangoes"
LEDGER = pdf(b"BT /F1 12 Tf 40 150 Td [(Led) -30 (ger) <2032303236>] TJ T* (Total\\072 17 crates) Tj ET",
             compress=True)
LEDGER_TEXT = "Ledger 2026\nTotal: 17 crates"
FONT_JUNK = zlib.compress(bytes(range(256)) * 4 + b" BT (\x01\x02\x03\x04\x05\x06\x07) Tj ET /F9 Tf")
WITH_FONT = MEMO.replace(b"trailer", b"6 0 obj\n<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(FONT_JUNK)
                         + FONT_JUNK + b"\nendstream\nendobj\ntrailer")  # a binary stream beside the page's


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("responses-open-spec"), {"model": {"max_context": 8192}}) as proc:
        yield proc


def post(server, body, path="/v1/responses"):
    return httpx.post(server.base_url + path, json=body, timeout=180)


def input_tokens(server, content) -> int:
    reply = post(server, {**MODEL, "input": [{"role": "user", "content": content}]}, "/v1/responses/input_tokens")
    assert reply.status_code == 200, reply.text
    return reply.json()["input_tokens"]


def file_part(raw: bytes, name: str, media: str) -> dict:
    return {"type": "input_file", "filename": name, "file_data": data_url(raw, media)}


@pytest.mark.parametrize("raw, text", [(MEMO, MEMO_TEXT), (LEDGER, LEDGER_TEXT), (WITH_FONT, MEMO_TEXT)],
                         ids=["plain", "flate", "binary_stream_beside"])
def test_a_pdf_reaches_the_model_as_its_text(server, raw, text):
    with_file = input_tokens(server, [QUESTION, file_part(raw, "memo.pdf", "application/pdf")])
    as_text = input_tokens(server, [QUESTION, {"type": "input_text",
                                               "text": f'\n\n<file name="memo.pdf">\n{text}\n</file>'}])
    assert with_file == as_text
    assert with_file > input_tokens(server, [QUESTION]) + 8  # the file is in the prompt, not dropped


def test_a_text_file_is_read_as_utf8_and_text_after_it_is_set_apart(server):
    note = "Café opens at nine.\nBring the keys."
    part = {"type": "input_file", "filename": "note.md", "file_data": base64.b64encode(note.encode()).decode()}
    after = {"type": "input_text", "text": "When does it open?"}
    expected = f'<file name="note.md">\n{note}\n</file>\n\nWhen does it open?'
    assert input_tokens(server, [part, after]) == input_tokens(server, [{"type": "input_text", "text": expected}])


def test_a_request_with_a_pdf_completes_over_json_sse_and_websocket(server):
    body = {**SHORT, "input": [{"role": "user", "content": [QUESTION, file_part(MEMO, "memo.pdf", "application/pdf")]}]}
    reply = post(server, body)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert response["status"] in ("completed", "incomplete") and response["output"]
    assert response["usage"]["input_tokens"] > input_tokens(server, [QUESTION])
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**body, "stream": True}, timeout=180) as r:
        final = check_event_stream(parse_sse(r.read().decode()))
    assert final["usage"]["input_tokens"] == response["usage"]["input_tokens"]
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        frames = [json.loads(socket.recv(timeout=180))]
        while frames[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
            frames.append(json.loads(socket.recv(timeout=180)))
    assert check_event_stream(frames)["usage"]["input_tokens"] == response["usage"]["input_tokens"]


def test_a_tool_output_may_carry_a_file(server):
    call = {"type": "function_call", "call_id": "call_doc", "name": "read_doc", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_doc",
              "output": [file_part(LEDGER, "ledger.pdf", "application/pdf")]}
    tool = {"type": "function", "name": "read_doc", "parameters": {"type": "object", "properties": {}}}
    ask = {"role": "user", "content": "Read the ledger."}
    reply = post(server, {**MODEL, "tools": [tool], "input": [ask, call, output]}, "/v1/responses/input_tokens")
    text_output = {**output, "output": f'<file name="ledger.pdf">\n{LEDGER_TEXT}\n</file>'}
    as_text = post(server, {**MODEL, "tools": [tool], "input": [ask, call, text_output]}, "/v1/responses/input_tokens")
    assert reply.status_code == 200 and reply.json() == as_text.json()


IMAGE_ONLY = pdf(b"q 100 0 0 100 0 0 cm /Im1 Do Q")


@pytest.mark.parametrize("part, param, words", [
    ({"type": "input_file", "file_url": "https://example.com/a.pdf"}, "input[0].content[1]", "file_url"),
    ({"type": "input_file", "file_id": "file-abc"}, "input[0].content[1]", "file_id"),
    ({"type": "input_file", "filename": "x.pdf"}, "input[0].content[1]", "file_data"),
    (file_part(b"\x89PNG\r\n\x1a\n", "logo.png", "image/png"), "input[0].content[1]", "image/png"),
    (file_part(IMAGE_ONLY, "scan.pdf", "application/pdf"), "input[0].content[1]", "no text"),
    (file_part(b"\xff\xfe\x00bad", "bad.txt", "text/plain"), "input[0].content[1]", "UTF-8"),
    ({"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,@@@"},
     "input[0].content[1].file_data", "base64"),
], ids=["url", "file_id", "no_data", "png", "image_only_pdf", "not_utf8", "bad_base64"])
def test_a_file_without_text_is_a_400_naming_the_part(server, part, param, words):
    reply = post(server, {**SHORT, "input": [{"role": "user", "content": [QUESTION, part]}]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_value", param)
    assert words in error["message"]


def first_sse_response(server, body) -> dict:
    """The response in ``response.created``; the stream is then dropped (the server cancels the rest)."""
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**body, "stream": True}, timeout=180) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                assert event["type"] == "response.created", event
                return event["response"]
    raise AssertionError("no event")


def test_the_output_cap_applied_is_reported(server):
    """No ``max_output_tokens``: the response ran under ``[engine] default_max_tokens`` (4096) held to
    the embedded model's output clamp, and says so."""
    body = {**MODEL, "temperature": 0, "input": "Tell me a long story."}
    assert first_sse_response(server, body)["max_output_tokens"] == EMBEDDED_MAX_OUTPUT_TOKENS
    assert first_sse_response(server, {**body, "max_output_tokens": 21})["max_output_tokens"] == 21
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        frame = json.loads(socket.recv(timeout=180))
    assert frame["type"] == "response.created"
    assert frame["response"]["max_output_tokens"] == EMBEDDED_MAX_OUTPUT_TOKENS
    done = post(server, {**SHORT, "input": "Say hi."}).json()
    assert done["max_output_tokens"] == 8
    assert httpx.get(f"{server.base_url}/v1/responses/{done['id']}").json()["max_output_tokens"] == 8
