"""SilvanForge's model server, ``forge serve MODEL``: a compiled model behind HTTP (Starlette on
uvicorn), concurrent requests micro-batched into one predict call.

- :mod:`silvanforge_serve.bodies`: what ``POST /predict`` accepts (records, columns, rows of
  numbers), read and checked before a request joins a batch;
- :mod:`silvanforge_serve.batching`: the micro-batcher (a bounded queue and one worker thread),
  with no HTTP in it;
- :mod:`silvanforge_serve.app`: the routes, and running them under uvicorn;
- :mod:`silvanforge_serve.cli`: the ``forge serve`` command (entry point ``silvanforge.commands``).
"""

from __future__ import annotations

__all__ = ["make_app", "MicroBatcher", "QueueFull"]


def __getattr__(name):
    # Starlette is imported when the application is made, not when forge lists its commands.
    if name == "make_app":
        from .app import make_app

        return make_app
    if name in ("MicroBatcher", "QueueFull"):
        from . import batching

        return getattr(batching, name)
    raise AttributeError(name)
