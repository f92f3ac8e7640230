"""JSON Schema's keywords, sorted by what they hold (for walking a schema) and by what they do.

A schema's keys are either keywords or data: only keywords are walked, and only the ones whose
value is a schema (or a map or list of schemas) lead to subschemas. Annotations constrain
nothing; a keyword a grammar backend cannot enforce is dropped, which only widens the set of
accepted values (every JSON Schema keyword restricts; none adds instances when present).
"""

from __future__ import annotations

SCHEMA_VALUED = frozenset({
    "additionalProperties", "propertyNames", "items", "additionalItems", "contains", "not", "if", "then",
    "else", "unevaluatedProperties", "unevaluatedItems", "contentSchema",
})
SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})  # also "items" in Draft 7's tuple form
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
DATA_VALUED = frozenset({
    "type", "enum", "const", "required", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "minProperties",
    "maxProperties", "minContains", "maxContains", "uniqueItems", "dependentRequired", "dependencies", "$ref",
    "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
})

# constrain nothing: dropped silently (``x-guidance`` too: it would restyle the fence's JSON)
ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$vocabulary", "title", "description", "examples", "default", "readOnly",
    "writeOnly", "deprecated", "contentMediaType", "contentEncoding", "contentSchema", "nullable",
})

KNOWN = SCHEMA_VALUED | SCHEMA_LISTS | SCHEMA_MAPS | DATA_VALUED | ANNOTATIONS

# keywords that constrain only through others: dropped along with them
COMPANIONS = {"if": ("then", "else"), "contains": ("minContains", "maxContains")}


def is_trivial(schema) -> bool:
    """True for a schema every value satisfies (``true``, ``{}``)."""
    return schema is True or (isinstance(schema, dict) and not schema)


def string_keys_only(schema) -> bool:
    """True for a ``propertyNames`` value that every JSON key satisfies: keys are always strings."""
    if is_trivial(schema):
        return True
    return isinstance(schema, dict) and set(schema) <= {"type"} | ANNOTATIONS and schema.get("type") == "string"
