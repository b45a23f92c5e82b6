"""The REST sidecar service (FastAPI): ``create_app`` builds it, ``serve`` runs it."""

from stretch.api.guard import BodyLimits
from stretch.api.main import create_app
from stretch.api.serve import serve

__all__ = ["BodyLimits", "create_app", "serve"]
