"""``GET /openapi.json``: FastAPI's schema of every route, completed with what it cannot see.

The routes read their bodies and query strings themselves (``api.body``, ``deps.allow_query``:
strict, OpenAI-shaped errors, unknown parameters refused), so FastAPI's introspection finds
only paths and path parameters. This module adds, per operation: the request body, the query
parameters each route accepts, the success status and shape, and the error responses (OpenAI's
shape everywhere, Anthropic's on ``/v1/messages``); plus the bearer credential every ``/v1``
route needs.

Invariants:
- Honest where it is specific: a management-API answer is described field by field (what
  memproxy itself writes: ``Memory.to_api`` and friends); a provider's answer relayed on a
  proxy surface is "an object", since memproxy passes on whatever the provider sent.
- Request bodies say what memproxy checks before anything is forwarded (required fields,
  types, ranges) and allow every other field (they are the provider's to judge).
- An operation the table does not know keeps FastAPI's description; none is dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

Schema = dict[str, Any]

_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}
ID = {"type": "string", "maxLength": 256, "pattern": r"^[\x20-\x7e]*$"}
_TIME = {"type": "string", "format": "date-time"}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": _STRING,
                    "type": _STRING,
                    "param": _NULLABLE_STRING,
                    "code": {"type": ["string", "integer", "null"]},
                },
            }
        },
    },
    "AnthropicError": {
        "type": "object",
        "required": ["type", "error"],
        "properties": {
            "type": {"const": "error"},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": _STRING, "message": _STRING},
            },
        },
    },
    "Memory": {
        "type": "object",
        "required": [
            "id",
            "text",
            "user_id",
            "agent_id",
            "session_id",
            "source",
            "metadata",
            "created_at",
            "updated_at",
            "expires_at",
        ],
        "properties": {
            "id": _STRING,
            "text": _STRING,
            "user_id": _STRING,
            "agent_id": _STRING,
            "session_id": _STRING,
            "source": {"enum": ["extracted", "manual"]},
            "metadata": {"type": "object"},
            "created_at": _TIME,
            "updated_at": _TIME,
            "expires_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "MemoryList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Memory"}},
            "next_cursor": _NULLABLE_STRING,
        },
    },
    "ScoredMemoryList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "allOf": [
                        {"$ref": "#/components/schemas/Memory"},
                        {
                            "type": "object",
                            "required": ["score"],
                            "properties": {"score": {"type": "number"}},
                        },
                    ]
                },
            },
        },
    },
    "History": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["event"],
                    "properties": {
                        "event": {"enum": ["ADD", "UPDATE", "DELETE"]},
                        "old_text": _NULLABLE_STRING,
                        "new_text": _NULLABLE_STRING,
                        "created_at": _TIME,
                        "source": _STRING,
                    },
                },
            },
        },
    },
    "Forget": {
        "type": "object",
        "required": ["object", "user_id", "agent_id", "deleted"],
        "properties": {
            "object": {"const": "memproxy.forget"},
            "user_id": _STRING,
            "agent_id": _STRING,
            "deleted": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
                "required": ["memories", "history", "messages", "jobs", "index_entries", "snapshots"],
            },
        },
    },
    "Deleted": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {"id": _STRING, "object": {"const": "memory.deleted"}, "deleted": {"const": True}},
    },
    "Import": {
        "type": "object",
        "required": ["object"],
        "properties": {"object": {"const": "memproxy.import"}},
    },
    "Job": {
        "type": "object",
        "required": ["id", "object", "status", "attempts", "created_at", "updated_at"],
        "properties": {
            "id": _STRING,
            "object": {"const": "memproxy.job"},
            "status": {"enum": ["pending", "running", "done", "dead"]},
            "user_id": _STRING,
            "agent_id": _STRING,
            "session_id": _STRING,
            "attempts": {"type": "integer"},
            "last_error": _NULLABLE_STRING,
            "created_at": _TIME,
            "updated_at": _TIME,
            "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
            "report": {"type": ["object", "null"]},
        },
    },
    "Queued": {
        "type": "object",
        "required": ["job_id", "object", "status"],
        "properties": {
            "job_id": _STRING,
            "object": {"const": "memproxy.job"},
            "status": {"const": "pending"},
        },
    },
    "JobList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "next_cursor": _NULLABLE_STRING,
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}},
        },
    },
    "ScopeList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "next_cursor": _NULLABLE_STRING,
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["object", "user_id", "agent_id"],
                    "properties": {
                        "object": {"const": "memproxy.scope"},
                        "user_id": _STRING,
                        "agent_id": _STRING,
                        "memories": {"type": "integer"},
                    },
                },
            },
        },
    },
    "ProviderObject": {
        "type": "object",
        "description": "The provider's answer, relayed as it sent it.",
    },
}

MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"type": ["string", "array", "null"]},
    },
}
PROVIDER_FIELDS = {"model": {"type": "string", "minLength": 1}, "stream": {"type": "boolean"}}
_METADATA = {"type": "object"}
_EXPIRES = {"type": ["string", "number", "null"], "format": "date-time"}

BODIES: dict[str, Schema] = {
    "embeddings": {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1}]},
        },
    },
    "memory_create": {
        "type": "object",
        "additionalProperties": False,
        # A scope (user or agent) and either a fact or a turn to extract facts from (202).
        "anyOf": [{"required": ["user_id"]}, {"required": ["agent_id"]}],
        "oneOf": [{"required": ["text"]}, {"required": ["messages"]}],
        "properties": {
            "user_id": ID,
            "agent_id": ID,
            "session_id": ID,
            "text": {"type": "string", "minLength": 1, "pattern": r"\S"},
            "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
            "metadata": _METADATA,
            "expires_at": _EXPIRES,
        },
    },
    "memory_search": {
        "type": "object",
        "additionalProperties": False,
        "required": ["query", "user_id"],
        "properties": {
            "query": {"type": "string", "minLength": 1, "pattern": r"\S"},
            "user_id": ID,
            "agent_id": ID,
            "top_k": {"type": "integer", "minimum": 1, "maximum": 100},
            "min_score": {"type": "number"},
        },
    },
    "memory_patch": {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "text": {"type": "string", "minLength": 1, "pattern": r"\S"},
            "metadata": _METADATA,
            "expires_at": _EXPIRES,
        },
    },
}

_SCOPE_QUERY = {"user_id": ID, "agent_id": ID}
_PAGE_QUERY = {"limit": {"type": "integer", "minimum": 1, "maximum": 1000}, "cursor": _STRING}

# (method, path) → request body, query parameters, success status and schema. Paths
# served without the /v1 prefix too (/chat/completions) reuse their /v1 entry. The API surfaces'
# POSTs describe themselves (``Surface.request_schema``, ``app.state.surface_specs``).
OPERATIONS: dict[tuple[str, str], Schema] = {
    ("get", "/v1/responses/{response_id}"): {"ok": ("200", "ProviderObject")},
    ("delete", "/v1/responses/{response_id}"): {"ok": ("200", "ProviderObject")},
    ("get", "/v1/models"): {"ok": ("200", "ProviderObject")},
    ("get", "/v1/models/{model_id}"): {"ok": ("200", "ProviderObject")},
    ("post", "/v1/embeddings"): {"body": "embeddings", "ok": ("200", "ProviderObject")},
    ("post", "/v1/memories"): {"body": "memory_create", "ok": ("201", "Memory")},
    ("get", "/v1/memories"): {
        "ok": ("200", "MemoryList"),
        "query": {
            **_SCOPE_QUERY,
            **_PAGE_QUERY,
            "source": {"enum": ["extracted", "manual"]},
            "has_expiry": {"enum": ["true", "false"]},
        },
    },
    ("delete", "/v1/memories"): {"ok": ("200", "Forget"), "query": _SCOPE_QUERY, "required": ["user_id"]},
    ("post", "/v1/memories/search"): {"body": "memory_search", "ok": ("200", "ScoredMemoryList")},
    ("get", "/v1/memories/export"): {"ok": ("200", None), "query": _SCOPE_QUERY, "ndjson": True},
    ("post", "/v1/memories/import"): {"ok": ("200", "Import"), "ndjson_body": True},
    ("get", "/v1/memories/{memory_id}"): {"ok": ("200", "Memory")},
    ("patch", "/v1/memories/{memory_id}"): {"body": "memory_patch", "ok": ("200", "Memory")},
    ("delete", "/v1/memories/{memory_id}"): {"ok": ("200", "Deleted")},
    ("get", "/v1/memories/{memory_id}/history"): {"ok": ("200", "History")},
    ("get", "/v1/jobs"): {
        "ok": ("200", "JobList"),
        "query": {
            **_SCOPE_QUERY,
            **_PAGE_QUERY,
            "status": {"enum": ["pending", "running", "done", "dead"]},
            "order": {"enum": ["asc", "desc"]},
        },
    },
    ("get", "/v1/jobs/{job_id}"): {"ok": ("200", "Job")},
    ("get", "/v1/jobs/{job_id}/messages"): {"ok": ("200", None)},
    ("post", "/v1/jobs/{job_id}/retry"): {"ok": ("200", "Job")},
    ("get", "/v1/scopes"): {"ok": ("200", "ScopeList"), "query": {**_SCOPE_QUERY, **_PAGE_QUERY, "q": ID}},
}
_PUBLIC = frozenset({"/healthz", "/readyz", "/metrics"})
# What each error status means on every authenticated route (the shape is Error's).
_ERRORS = {
    "400": "Invalid request: a parameter is missing, of the wrong type or out of range (param names it).",
    "401": "No credential, or one that is not accepted.",
    "404": "No such object (another tenant's is answered the same way).",
    "409": "Conflict: an identical memory exists, or the job is not dead.",
    "413": "The request body is over server.max_body_bytes.",
    "429": "Rate limited (the provider's answer, relayed).",
}


def _health(responses: dict[str, Any]) -> None:
    responses["200"] = {
        "description": "Alive",
        "content": {
            "application/json": {
                "schema": {"type": "object", "required": ["status"], "properties": {"status": _STRING}}
            }
        },
    }


def _ready(responses: dict[str, Any]) -> None:
    body = {
        "schema": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"enum": ["ready", "degraded", "starting"]},
                "memory": {"type": "object"},
                "problems": {"type": "array", "items": _STRING},
                "degraded": {"type": "array"},
            },
        }
    }
    responses["200"] = {
        "description": "Ready (memory may be degraded: see memory)",
        "content": {"application/json": body},
    }
    responses["503"] = {
        "description": "Starting, or a part has failed",
        "content": {"application/json": body},
    }


def _metrics(responses: dict[str, Any]) -> None:
    responses["200"] = {
        "description": "Prometheus text format",
        "content": {"text/plain": {"schema": _STRING}},
    }


_PUBLIC_RESPONSES = {"/healthz": _health, "/readyz": _ready, "/metrics": _metrics}


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The served schema (built once per app; ``app.openapi`` is set to this)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title="memproxy",
        version=app.version,
        routes=app.routes,
        description="OpenAI-compatible LLM proxy with long-term memory.",
    )
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {}).update(copy.deepcopy(SCHEMAS))
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    surfaces: dict[str, Schema] = getattr(app.state, "surface_specs", {})
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            _complete(method, path, operation, surfaces.get(path) if method == "post" else None)
    app.openapi_schema = schema
    return schema


def _complete(method: str, path: str, operation: dict[str, Any], surface: Schema | None = None) -> None:
    canonical = path if path.startswith("/v1/") or path in _PUBLIC else "/v1" + path
    spec = OPERATIONS.get((method, canonical)) or surface or {}
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)  # FastAPI's validation error: memproxy answers those with a 400
    if path in _PUBLIC:
        operation["security"] = []
        _PUBLIC_RESPONSES[path](responses)
        return
    operation["security"] = [{"bearer": []}]
    error = "#/components/schemas/" + ("AnthropicError" if spec.get("anthropic") else "Error")
    for status, description in _ERRORS.items():
        responses[status] = {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": error}}},
        }
    if "ok" in spec:
        status, name = spec["ok"]
        responses.pop("200", None)
        media = "application/x-ndjson" if spec.get("ndjson") else "application/json"
        body: Schema = {"$ref": f"#/components/schemas/{name}"} if name else {}
        responses[status] = {"description": "Success", "content": {media: {"schema": body}}}
        if canonical == "/v1/memories" and method == "post":
            responses["202"] = {
                "description": "With messages instead of text: the turn is queued.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Queued"}}},
            }
        if spec.get("stream"):
            # Each event's data is the provider's chunk, relayed.
            responses[status]["content"]["text/event-stream"] = {
                "schema": {"type": "object", "properties": {"data": _STRING, "event": _STRING}}
            }
    if "body" in spec or "body_schema" in spec:
        body_schema = spec["body_schema"] if "body_schema" in spec else BODIES[spec["body"]]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": copy.deepcopy(body_schema)}},
        }
    if spec.get("ndjson_body"):
        operation["requestBody"] = {
            "required": True,
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    required = set(spec.get("required", ()))
    params = operation.setdefault("parameters", [])
    for name, value in spec.get("query", {}).items():
        params.append({"name": name, "in": "query", "required": name in required, "schema": value})
