"""What a hand-validated JSON route publishes in the OpenAPI document: its request-body schema and
its answers (status -> media type -> schema), as JSON Schema (OpenAPI 3.1), so schema-driven
clients and fuzzers can build real bodies. Handlers read raw JSON and validate it themselves; that
validation stays the authority and each adapter's schema documents it.

Also the OpenAI error body every OpenAI-shaped route answers with; the JSON Schema builders are
in :mod:`kvgate.core.http.schema_parts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Iterable

from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, Operation, RequestBody

from kvgate.core.http.schema_parts import STRING, Schema, nullable, obj

JSON = "application/json"
SSE = "text/event-stream"
Answers = dict[int, dict[str, Schema]]  # status -> media type -> schema

# what any guarded JSON route may answer besides its success: bad input, no key, unknown model,
# a body sent too slowly or too large, a tenant over its limits, a server at capacity
ERROR_STATUSES = (400, 401, 404, 408, 413, 429, 503)

SSE_EVENT: Schema = obj({"event": STRING, "data": STRING, "id": STRING}, required=["data"])  # one event of a stream
OPENAI_ERROR: Schema = obj({"error": obj({"message": STRING, "type": STRING, "param": nullable(STRING),
                                          "code": nullable(STRING)},
                                         required=["message", "type", "param", "code"])}, required=["error"])


def answers(ok: dict[str, Schema], error: Schema, statuses: Iterable[int] = ERROR_STATUSES) -> Answers:
    """200 with the media types in ``ok``, each error status with ``error`` as JSON."""
    return {200: ok, **{status: {JSON: error} for status in statuses}}


def json_body_operation(request: Schema, replies: Answers) -> type[Operation]:
    """An ``operation_class`` for a route handler: the document shows ``request`` as its required
    JSON body and ``replies`` as its responses."""

    @dataclass
    class JsonBodyOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = RequestBody(content={JSON: OpenAPIMediaType(schema=request)}, required=True)
            self.responses = {str(status): _response(status, media) for status, media in replies.items()}

    return JsonBodyOperation


def _response(status: int, media: dict[str, Schema]) -> OpenAPIResponse:
    content = {kind: OpenAPIMediaType(schema=schema) for kind, schema in media.items()}
    return OpenAPIResponse(description=HTTPStatus(status).phrase, content=content)
