"""jetraft: a NATS server with JetStream, clustered with RAFT, written in Python."""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES

__version__ = "0.1.0"


def compiled_modules() -> list[str]:
    """The jetraft modules this installation runs compiled (the optional mypyc build, see
    setup.py); empty for the pure-Python build. An extension module beside a .py file is the
    one Python imports, so finding the file is enough."""
    root = os.path.dirname(os.path.abspath(__file__))
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            suffix = next((s for s in EXTENSION_SUFFIXES if name.endswith(s)), None)
            if suffix is not None:
                rel = os.path.relpath(os.path.join(folder, name[: -len(suffix)]), root)
                found.append("jetraft." + rel.replace(os.sep, "."))
    return sorted(found)


def build_name() -> str:
    """'mypyc (N modules compiled)' or 'pure Python': which build a measurement comes from."""
    mods = compiled_modules()
    return f"mypyc ({len(mods)} modules compiled)" if mods else "pure Python"
