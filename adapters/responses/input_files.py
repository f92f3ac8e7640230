"""An ``input_file`` content part -> the text the model reads.

A text model can read a file whose text can be had: ``file_data`` (a ``data:<type>;base64,...`` URL,
or plain base64 typed by ``filename``'s extension) holding UTF-8 text (``text/*``, JSON, XML, YAML,
source code) or a PDF. A PDF's text is read from its content streams (uncompressed or
``FlateDecode``): the strings of its text-showing operators (``Tj``, ``TJ``, ``'``, ``"``), a line
break at each new text line. A PDF whose fonts map glyphs through their own encodings yields no
readable text and is refused, as are ``file_url`` and ``file_id`` (this server fetches nothing and
keeps no files) and any other type, each with a 400 naming the part.

The model sees the file as ``<file name="...">\\n...text...\\n</file>`` in the message's text.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
import zlib
from typing import Any

from kvgate.core.errors import InvalidRequest

TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml",
              "application/javascript", "application/x-sh", "application/sql")
TEXT_SUFFIXES = (".txt", ".md", ".json", ".jsonl", ".csv", ".tsv", ".xml", ".yaml", ".yml", ".toml", ".py", ".js",
                 ".ts", ".html", ".css", ".sh", ".sql", ".rs", ".go", ".java", ".c", ".h", ".cpp", ".log", ".ini")
_STREAM = re.compile(rb"<<(?P<dict>.*?)>>\s*stream\r?\n(?P<data>.*?)\r?\n?endstream", re.S)
_TOKEN = re.compile(rb"\((?:\\.|[^\\()]|\((?:\\.|[^\\()])*\))*\)|<[0-9A-Fa-f\s]*>|\[|\]|/[^\s/\[\]()<>]+|"
                    rb"[A-Za-z'\"*]+|[-+.\d]+")
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f"}


def file_part_text(part: dict[str, Any], spot: str) -> str:
    """The model's view of one ``input_file`` part; a 400 naming ``spot`` when it has no text."""
    name = part.get("filename") if isinstance(part.get("filename"), str) and part.get("filename") else "file"
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        source = "file_url" if part.get("file_url") else "file_id" if part.get("file_id") else None
        what = f"gives a {source}; this server fetches no files" if source else "has no file_data"
        raise InvalidRequest(f"{spot} {what}: send the file's content as file_data.", param=spot)
    media, raw = _decode(data, name, spot)
    if media == "application/pdf" or raw.startswith(b"%PDF-"):
        text = pdf_text(raw)
        if not text.strip():
            raise InvalidRequest(f"{spot} is a PDF with no text this server can read; send its text.", param=spot)
    elif media.startswith("text/") or media in TEXT_TYPES or name.lower().endswith(TEXT_SUFFIXES):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidRequest(f"{spot} ({name}) is not UTF-8 text.", param=spot) from None
    else:
        raise InvalidRequest(f"{spot} ({name}, {media or 'unknown type'}) is not a text or PDF file; "
                             "send its text.", param=spot)
    return f'<file name="{name}">\n{text.strip()}\n</file>'


def _decode(data: str, name: str, spot: str) -> tuple[str, bytes]:
    media = mimetypes.guess_type(name)[0] or ""
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        if ";base64" not in header:
            raise InvalidRequest(f"{spot}.file_data must be a base64 data URL.", param=f"{spot}.file_data")
        media = header[5:].split(";")[0].strip().lower() or media
    try:
        return media, base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{spot}.file_data is not valid base64.", param=f"{spot}.file_data") from None


def pdf_text(raw: bytes) -> str:
    """The text of a PDF's content streams (best effort: simple fonts, uncompressed or Flate)."""
    lines: list[str] = []
    for match in _STREAM.finditer(raw):
        data = match.group("data")
        if b"/FlateDecode" in match.group("dict"):
            try:
                data = zlib.decompress(data)
            except zlib.error:
                continue
        elif b"/Filter" in match.group("dict"):
            continue
        if re.search(rb"\bBT\b", data) and b"Tf" in data:  # a content stream, not a font or an image
            shown = [line.strip() for line in _shown_text(data) if line.strip()]
            if _readable("".join(shown)):
                lines.extend(shown)
    return "\n".join(lines)


def _readable(text: str) -> bool:
    """Mostly printable: glyph codes of a font with its own encoding are not."""
    return sum(ch.isprintable() or ch.isspace() for ch in text) >= 0.9 * len(text)


def _shown_text(content: bytes) -> list[str]:
    lines, line, operands = [], [], []
    for token in _TOKEN.findall(content):
        if token[:1] in (b"(", b"<") or token in (b"[", b"]") or token[:1] in b"-+.0123456789/":
            operands.append(token)
            continue
        if token in (b"Tj", b"TJ", b"'", b'"'):
            if token in (b"'", b'"') and line:
                lines.append("".join(line))
                line = []
            line.extend(_string(t) for t in operands if t[:1] in (b"(", b"<"))
        elif token in (b"T*", b"ET") or (token in (b"Td", b"TD") and len(operands) >= 2
                                          and operands[-1] not in (b"0", b"0.0")):
            if line:
                lines.append("".join(line))
                line = []
        operands = []
    if line:
        lines.append("".join(line))
    return lines


def _string(token: bytes) -> str:
    if token[:1] == b"<":
        digits = re.sub(rb"\s", b"", token[1:-1])
        return bytes.fromhex((digits + b"0" * (len(digits) % 2)).decode()).decode("latin-1")
    out, body, index = bytearray(), token[1:-1], 0
    while index < len(body):
        char = body[index:index + 1]
        if char != b"\\":
            out += char
            index += 1
            continue
        nxt = body[index + 1:index + 2]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            index += 2
        elif nxt and nxt in b"01234567":
            octal = re.match(rb"[0-7]{1,3}", body[index + 1:index + 4]).group()
            out.append(int(octal, 8) & 0xFF)
            index += 1 + len(octal)
        elif nxt in (b"\n", b"\r"):
            index += 2
        else:
            out += nxt
            index += 2
    return out.decode("latin-1")
