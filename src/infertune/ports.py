"""A free TCP port on the loopback interface, for a server this process is about to start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out and released: free now (another process could take it before the server
    binds, which the server's start reports)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
