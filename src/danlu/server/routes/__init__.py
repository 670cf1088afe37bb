"""The REST routes of docs/api.md: thin handlers (parse, authenticate, call a service,
serialise). Each module builds one ``APIRouter``; :mod:`danlu.server.app` mounts them."""
