"""The REST sidecar service (FastAPI): ``create_app`` builds it, ``serve`` runs it."""

from api.guard import BodyLimits
from api.main import create_app
from api.serve import serve

__all__ = ["BodyLimits", "create_app", "serve"]
