"""``GET /openapi.json`` (issue 24 finding 8): the real FastAPI schema, covering the proxy
surfaces and the management API, and honest enough that a fuzzer driven by it finds no
server error and no answer that contradicts it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.proxy import Proxy
from tests.support.serve_process import ServeProcess, write_config

SURFACES = [
    ("post", "/v1/chat/completions"), ("post", "/v1/responses"), ("post", "/v1/messages"),
    ("post", "/v1/embeddings"), ("get", "/v1/models"), ("get", "/v1/models/{model_id}"),
    ("post", "/v1/memories"), ("get", "/v1/memories"), ("delete", "/v1/memories"),
    ("post", "/v1/memories/search"), ("get", "/v1/memories/export"), ("post", "/v1/memories/import"),
    ("patch", "/v1/memories/{memory_id}"), ("get", "/v1/memories/{memory_id}/history"),
    ("get", "/v1/jobs"), ("post", "/v1/jobs/{job_id}/retry"), ("get", "/v1/scopes"),
    ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"),
]  # fmt: skip
# Bounded so the slow tier stays around a minute on two shared cores; derandomized, so a
# failure reproduces.
POSITIVE_EXAMPLES = 25
NEGATIVE_EXAMPLES = 10


def test_the_schema_is_served_without_a_credential_and_covers_every_surface(proxy: Proxy) -> None:
    response = httpx.get(proxy.url + "/openapi.json", timeout=10)
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.1")
    served = {(method, path) for path, item in schema["paths"].items() for method in item}
    assert set(SURFACES) <= served
    assert not [p for p in schema["paths"] if p.startswith("/ui")]  # the console is pages, not API
    create = schema["paths"]["/v1/memories"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]
    assert body["additionalProperties"] is False and "text" in body["properties"]
    assert {"201", "202", "400", "401"} <= set(create["responses"])
    assert "422" not in create["responses"]  # memproxy answers validation errors with 400
    listing = schema["paths"]["/v1/memories"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {"user_id", "agent_id", "limit", "cursor", "source",
                                                          "has_expiry"}  # fmt: skip
    assert create["security"] == [{"bearer": []}] and schema["paths"]["/healthz"]["get"]["security"] == []
    messages = schema["paths"]["/v1/messages"]["post"]["responses"]["400"]["content"]["application/json"]
    assert messages["schema"]["$ref"].endswith("/AnthropicError")


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_answer_off_schema(
    tmp_path: Path, upstream: tuple[Any, str]
) -> None:
    import schemathesis
    from schemathesis import checks
    from schemathesis.core.result import Ok

    @schemathesis.serializer("application/x-ndjson")
    def ndjson(ctx: Any, value: Any) -> bytes | None:  # the import's JSON Lines body
        return value.encode() if isinstance(value, str) else None

    with socket.socket() as probe:  # a free port (the serve log's wording is not this test's subject)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": port},
        "storage": {"data_dir": str(tmp_path / "data")},
        "upstream": {"api_base": upstream[1], "timeout_s": 5},
        "extraction": {"model": "extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.05},
    })  # fmt: skip
    verified = [checks.not_a_server_error, checks.status_code_conformance,
                checks.content_type_conformance, checks.response_schema_conformance]  # fmt: skip
    with ServeProcess("serve", config, tmp_path / "serve.log") as server:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url)
        schema = schemathesis.openapi.from_url(url + "/openapi.json")
        ran: dict[str, int] = {}
        failures: dict[str, str] = {}
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), f"an operation schemathesis cannot read: {result}"
            operation = result.ok()
            has_input = bool(operation.body or operation.query or operation.path_parameters)
            for mode, examples in ((schemathesis.GenerationMode.POSITIVE, POSITIVE_EXAMPLES),
                                   (schemathesis.GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)):  # fmt: skip
                if mode is schemathesis.GenerationMode.NEGATIVE and not has_input:
                    continue  # nothing to make invalid
                label = f"{operation.label} ({mode.value})"
                ran[label] = 0
                try:
                    _fuzz(operation, mode, examples, url, verified, ran, label)()
                except Exception as exc:
                    failures[label] = str(exc)[:2000]
        total = sum(ran.values())
        print(f"schemathesis: {total} cases over {len(ran)} operation/mode pairs, {len(failures)} failing")
        assert failures == {}
        assert total >= len(SURFACES) * 10  # it did run, for real
        assert "Traceback" not in server.log_text()


def _fuzz(operation: Any, mode: Any, examples: int, url: str, verified: list[Any], ran: dict[str, int],
          label: str) -> Any:  # fmt: skip
    """A Hypothesis test of ``examples`` generated calls of ``operation``, counting them in ``ran``."""
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])  # fmt: skip
    @given(case=operation.as_strategy(mode))
    def call(case: Any) -> None:
        ran[label] += 1
        response = case.call(base_url=url, headers={"Authorization": "Bearer sk-schemathesis"}, timeout=30)
        case.validate_response(response, checks=verified)

    return call
