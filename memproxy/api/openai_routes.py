"""The rest of the OpenAI surface we proxy: models and embeddings."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import read_json_object, require_str
from memproxy.api.deps import CredentialDep, SettingsDep, UpstreamDep
from memproxy.errors import ApiError

router = APIRouter()


@router.get("/v1/models")
@router.get("/models")
async def list_models(credential: CredentialDep, upstream: UpstreamDep) -> Response:
    return JSONResponse(await upstream.models(credential))


@router.get("/v1/models/{model_id:path}")
@router.get("/models/{model_id:path}")
async def retrieve_model(model_id: str, credential: CredentialDep, upstream: UpstreamDep) -> Response:
    return JSONResponse(await upstream.model(model_id, credential))


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def create_embeddings(
    request: Request, credential: CredentialDep, upstream: UpstreamDep, settings: SettingsDep
) -> Response:
    body = await read_json_object(request, settings.server.max_body_bytes)
    require_str(body, "model")
    if not isinstance(body.get("input"), str | list) or not body.get("input"):
        raise ApiError(
            400, "'input' must be a non-empty string or array.", param="input", code="invalid_type"
        )
    return JSONResponse(await upstream.embeddings(body, credential))
