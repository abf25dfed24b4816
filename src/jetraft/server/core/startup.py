"""Failures that stop the server from starting: one line for the operator, no traceback.

nats-server refuses to start when a listener cannot bind or the JetStream store directory is
unusable; jetraft does the same, at start, rather than report healthy and fail later.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class StartError(Exception):
    """The server cannot start; ``str()`` is the one-line reason."""


def _reason(exc: OSError) -> str:
    if isinstance(exc.errno, int) and exc.errno > 0:
        return os.strerror(exc.errno).lower()
    return str(exc)


def listen_error(what: str, host: str, port: int, exc: OSError) -> StartError:
    """A listener that could not open (port taken, address not local, no permission)."""
    shown = f"[{host}]" if ":" in host else host
    return StartError(f"can't listen for {what} on {shown}:{port}: {_reason(exc)}")


def check_store_dir(path: Path) -> None:
    """JetStream's directory must exist (created here if need be) and take files; the texts
    are nats-server's."""
    prefix = "Can't start JetStream: "
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StartError(prefix + "storage directory is not a directory") from None
    except OSError as exc:
        where = exc.filename or path
        raise StartError(
            f"{prefix}could not create storage directory - mkdir {where}: {_reason(exc)}"
        ) from None
    if not path.is_dir():
        raise StartError(prefix + "storage directory is not a directory")
    try:
        with tempfile.TemporaryFile(dir=path, prefix="_test_"):
            pass
    except OSError:
        raise StartError(prefix + "storage directory is not writable") from None
