"""Whether the Hugging Face Hub can be reached, found out in at most PROBE_TIMEOUT_S seconds: one TCP connection to
the Hub's endpoint (HF_ENDPOINT, else huggingface.co) or to the proxy the environment names for it.

Only a connection is tried, nothing is sent: a reachable Hub costs one round trip, and an unreachable one (no
network, no DNS, a firewall) is said at once instead of after huggingface_hub's retries.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0
# How often the wait for the attempt reads the clock: the deadline is kept to within this, and a fake clock (tests)
# moves the deadline without the real seconds passing.
POLL_S = 0.05


def endpoint() -> str:
    """The Hub's address as huggingface_hub reads it (HF_ENDPOINT), else its default."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _target(url: str) -> tuple[str, int]:
    """(host, port) the first connection goes to: the proxy the environment names for the URL's scheme, else the
    URL's host."""
    parts = urlsplit(url)
    scheme = parts.scheme or "https"
    proxy = next(
        (
            os.environ[k]
            for k in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY")
            if os.environ.get(k)
        ),
        None,
    )
    host = parts.hostname or ""
    if proxy and not _no_proxy(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return proxy_parts.hostname or "", proxy_parts.port or 80
    return host, parts.port or (443 if scheme == "https" else 80)


def _no_proxy(host: str) -> bool:
    entries = (os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or "").split(",")
    return any(e.strip() == "*" or (e.strip() and host.endswith(e.strip().lstrip("."))) for e in entries)


def unreachable(url: str, timeout: float = PROBE_TIMEOUT_S, clock=time.monotonic) -> str | None:
    """None when a TCP connection to `url` (or its proxy) opens within `timeout` seconds of `clock`, else why not,
    in a few words. Name resolution counts against the timeout too (it runs in a thread: getaddrinfo has no
    timeout); an attempt still running at the deadline is left to its daemon thread."""
    host, port = _target(url)
    if not host:
        return f"HF_ENDPOINT {url!r} names no host"
    outcome: list[str | None] = []
    done = threading.Event()

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except socket.gaierror:
            outcome.append(f"cannot resolve {host}")
        except OSError as exc:
            outcome.append(f"no connection to {host}:{port}: {exc.strerror or type(exc).__name__}")
        finally:
            done.set()

    deadline = clock() + timeout
    threading.Thread(target=attempt, daemon=True).start()
    while not done.wait(POLL_S) and clock() < deadline:
        pass  # the attempt still runs and the deadline is ahead
    if not outcome:
        return f"no answer from {host}:{port} in {timeout:g} s"
    return outcome[0]
