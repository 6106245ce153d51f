"""``forge serve``'s application under a real uvicorn, as the serving tests run it: on
127.0.0.1, a port the system picks, in a thread, stopped after the block."""

from __future__ import annotations

import contextlib
import threading
import time

from silvanforge_serve.app import listen, make_server


@contextlib.contextmanager
def serving(app):
    """uvicorn serving ``app`` on 127.0.0.1, a port the system picks, in a thread; yields its URL."""
    sock = listen("127.0.0.1", 0)
    server = make_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):  # bounded wait for startup
        if server.started:
            break
        time.sleep(0.01)
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
