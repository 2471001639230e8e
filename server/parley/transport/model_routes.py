"""OpenAI's model listing (``GET /v1/models``, ``GET /v1/models/{model}``), which its
clients call to check a server and its key before they send audio.

The one model listed is the one that answers: a request's own ``model`` field is
ignored by every wire (protocol.md section 16), so listing other names would promise
a choice the server does not offer. The same keys and origins as the uploads apply.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.protocol.paths import MODELS_PATH
from parley.transport import openai_answers
from parley.transport.upload_errors import UploadCode, UploadError
from parley.transport.uploads import FileDoor

OWNER = "parley"


class ModelRoutes:
    """The served model, as OpenAI's API lists its models."""

    def __init__(self, door: FileDoor, model_label: str, created: int):
        self._door = door
        self._model = {"id": model_label, "object": "model", "created": created, "owned_by": OWNER}

    def routes(self) -> list[Route]:
        """OpenAI's model listing and model lookup routes."""
        return [
            Route(MODELS_PATH, self.listing, methods=["GET"]),
            Route(MODELS_PATH + "/{model:path}", self.one, methods=["GET"]),
        ]

    async def listing(self, request: Request) -> Response:
        """``GET /v1/models``: the one model this server answers with."""
        try:
            self._door.authorize(request)
        except UploadError as error:
            return openai_answers.openai_error(error)
        return JSONResponse({"object": "list", "data": [self._model]})

    async def one(self, request: Request) -> Response:
        """``GET /v1/models/{model}``: that model, or 404 ``model_not_found`` for any
        other name."""
        try:
            self._door.authorize(request)
            asked = request.path_params["model"]
            if asked != self._model["id"]:
                raise UploadError(
                    UploadCode.MODEL_NOT_FOUND,
                    f"the model {asked!r} is not served here; {self._model['id']!r} is",
                    "model",
                )
        except UploadError as error:
            return openai_answers.openai_error(error)
        return JSONResponse(self._model)
