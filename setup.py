"""The optional mypyc build: compiles jetraft's hot sans-I/O modules to C extensions.

Everything about the package lives in pyproject.toml; this file only adds extension modules,
and only when asked for with the environment variable JETRAFT_MYPYC:

    JETRAFT_MYPYC=1 pip install .      compiled modules, or a clear error if they cannot be built
    JETRAFT_MYPYC=auto pip install .   compiled modules when a C compiler works, else pure Python
    pip install .                      pure Python (no compiler, no mypy needed)

The pure-Python modules stay the reference: every compiled module is also shipped as .py, and
behaves the same (CI runs the tests on both builds, see `make test-compiled`). mypy (which
carries mypyc) is added to the build requirements only for a compiled build, by the build
backend in build_support/jetraft_build.py.
"""

from __future__ import annotations

import os
import sys
import tempfile

from setuptools import setup

# The modules on the per-message paths (profiled with py-spy on benchmarks/core_pubsub.py and
# benchmarks/js_cpu.py): the client protocol parser, subject matching, routing and the client
# connection's delivery and write buffering (core publish/subscribe); the stream state
# machine, the file and memory stores, the consumer core and the server's JetStream intake,
# commit and delivery glue (JetStream publish and consume); the Spark sink's per-message
# loops (spark/_publoops.py: a Spark worker's write) and the Spark connector's loops over
# received frames (spark/_frames.py: a Spark worker's read). Each must compile under mypyc
# without changing behaviour (docs/architecture.md, "The compiled build", lists what that
# rules out: msgspec Structs stay in modules not listed here, such as jetstream/entries.py).
MYPYC_MODULES = [
    "src/jetraft/protocol/client.py",
    "src/jetraft/protocol/headers.py",
    "src/jetraft/protocol/subjects.py",
    "src/jetraft/server/core/accounts.py",
    "src/jetraft/server/core/client_conn.py",
    "src/jetraft/server/core/reply_permits.py",
    "src/jetraft/server/core/router.py",
    "src/jetraft/server/core/sublist.py",
    "src/jetraft/jetstream/stream.py",
    "src/jetraft/jetstream/publish_headers.py",
    "src/jetraft/jetstream/lone_id_publish.py",
    "src/jetraft/jetstream/dedupe.py",
    "src/jetraft/jetstream/republish.py",
    "src/jetraft/jetstream/retention.py",
    "src/jetraft/jetstream/expiry.py",
    "src/jetraft/jetstream/store/_base.py",
    "src/jetraft/jetstream/store/_blocks.py",
    "src/jetraft/jetstream/store/_index.py",
    "src/jetraft/jetstream/store/_index_chunks.py",
    "src/jetraft/jetstream/store/_index_subjects.py",
    "src/jetraft/jetstream/store/_records.py",
    "src/jetraft/jetstream/store/_block_reads.py",
    "src/jetraft/jetstream/store/_reclaim.py",
    "src/jetraft/jetstream/store/file.py",
    "src/jetraft/jetstream/store/memory.py",
    "src/jetraft/jetstream/acks.py",
    "src/jetraft/jetstream/consumer.py",
    "src/jetraft/jetstream/pull.py",
    "src/jetraft/jetstream/direct_get.py",
    "src/jetraft/jetstream/models.py",
    "src/jetraft/server/js/streams.py",
    "src/jetraft/server/js/consumers.py",
    "src/jetraft/server/js/consumer_events.py",
    "src/jetraft/server/js/consumer_pin.py",
    "src/jetraft/server/js/consumer_pull.py",
    "src/jetraft/server/js/consumer_acks.py",
    "src/jetraft/server/js/consumer_runtime.py",
    "src/jetraft/server/js/commit.py",
    "src/jetraft/server/js/replies.py",
    "src/jetraft/server/core/internal.py",
    "src/jetraft/spark/_publoops.py",
    "src/jetraft/spark/_frames.py",
]


def _mode() -> str:
    value = os.environ.get("JETRAFT_MYPYC", "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return "off"
    if value == "auto":
        return "auto"
    if value in ("1", "yes", "true", "on"):
        return "on"
    sys.exit(f"JETRAFT_MYPYC={value!r}: expected 1, auto or 0")


def _compiler_works() -> bool:
    """Whether a C extension can be compiled and linked here (a trial build of an empty one)."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "_jetraft_probe.c")
        with open(src, "w") as f:
            f.write(
                "#include <Python.h>\n"
                "static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"_jetraft_probe\"};\n"
                "PyMODINIT_FUNC PyInit__jetraft_probe(void) { return PyModule_Create(&m); }\n"
            )
        dist = Distribution({"ext_modules": [Extension("_jetraft_probe", [src])]})
        cmd = build_ext(dist)
        cmd.build_temp = os.path.join(tmp, "tmp")
        cmd.build_lib = os.path.join(tmp, "lib")
        cmd.ensure_finalized()
        try:
            cmd.run()
        except Exception as exc:  # CompileError, LinkError, a missing compiler: all mean no
            print(f"jetraft: no working C compiler ({exc})", file=sys.stderr)
            return False
    return True


def _ext_modules() -> list[object]:
    mode = _mode()
    if mode == "off" or os.environ.get("_JETRAFT_BUILD_NO_EXTENSIONS"):
        return []  # pure Python, or a backend hook that only asks for requirements or metadata
    if not _compiler_works():
        if mode == "auto":
            print("jetraft: JETRAFT_MYPYC=auto: installing pure Python", file=sys.stderr)
            return []
        sys.exit("jetraft: JETRAFT_MYPYC=1 needs a working C compiler (unset it: pure Python)")
    try:
        from mypyc.build import mypycify
    except ImportError:
        if mode == "auto":
            print("jetraft: mypyc not importable: installing pure Python", file=sys.stderr)
            return []
        sys.exit("jetraft: JETRAFT_MYPYC=1 needs mypy (which carries mypyc) in the build env")
    return list(mypycify(MYPYC_MODULES, opt_level="3"))


setup(ext_modules=_ext_modules())
