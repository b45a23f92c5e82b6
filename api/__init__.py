"""The REST sidecar service (FastAPI): arrives with the service issue."""

__all__: list[str] = []
