"""The failure reason read from each protocol's error body, stream event and WebSocket frame."""

from __future__ import annotations

from kvgate.core.http.routing import sse_event
from kvgate.plugins.request_log.request_outcome import MAX_REASON_CHARS, error_reason, stream_error_reason


def test_error_bodies_of_every_protocol():
    openai = {"error": {"message": "messages: must be a list", "type": "invalid_request_error", "code": "invalid_value"}}
    assert error_reason(openai) == "invalid_value: messages: must be a list"
    anthropic = {"type": "error", "error": {"type": "not_found_error", "message": "no such model"}}
    assert error_reason(anthropic) == "not_found_error: no such model"
    failed = {"type": "response.failed", "response": {"error": {"code": "context_length_exceeded", "message": "too\nlong"}}}
    assert error_reason(failed) == "context_length_exceeded: too long"
    assert error_reason({"choices": []}) is None and error_reason("text") is None
    assert len(error_reason({"error": {"message": "x" * 5000}})) == MAX_REASON_CHARS + 3


def test_stream_error_events_and_ordinary_chunks():
    assert stream_error_reason(sse_event({"error": {"message": "Generation failed.", "code": "server_error"}})) \
        == "server_error: Generation failed."
    assert stream_error_reason(sse_event({"type": "error", "error": {"type": "api_error", "message": "boom"}},
                                         "error")) == "api_error: boom"
    assert stream_error_reason(sse_event({"type": "response.failed", "response": {"error": {
        "code": "server_error", "message": "ended"}}}, "response.failed")) == "server_error: ended"
    # a delta that merely mentions errors is not an error event
    assert stream_error_reason(sse_event({"choices": [{"delta": {"content": '"error": no'}}]})) is None
    assert stream_error_reason(sse_event({"type": "content_block_delta", "delta": {"text": "error"}},
                                         "content_block_delta")) is None
