"""jetraft's build backend: setuptools', plus mypy in the build requirements of a compiled build.

pyproject.toml's static build requirements are what every install downloads; mypy (which
carries mypyc) is needed only when JETRAFT_MYPYC asks for the compiled modules (see setup.py),
so it is added here, per build, instead of there, with jetraft's own dependencies: mypyc
type-checks the code before compiling it, and needs their types then (pip builds the wheel
before it installs them). The hooks that only ask for requirements or
metadata run setup.py too (before mypy is installed, or needlessly compiling): for them
setup.py is told to leave the extension modules out.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the other PEP 517/660 hooks as they are

MYPY_REQUIREMENT = "mypy>=1.10"
NO_EXTENSIONS = "_JETRAFT_BUILD_NO_EXTENSIONS"  # read by setup.py


def _compiled_requirements() -> list[str]:
    value = os.environ.get("JETRAFT_MYPYC", "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return []
    with open("pyproject.toml", "rb") as f:  # hooks run in the project's directory
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    return [MYPY_REQUIREMENT, *deps]


@contextmanager
def _without_extensions() -> Iterator[None]:
    os.environ[NO_EXTENSIONS] = "1"
    try:
        yield
    finally:
        del os.environ[NO_EXTENSIONS]


def _hook(name: str) -> Callable[..., Any]:
    return getattr(_setuptools, name)  # type: ignore[no-any-return]


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    with _without_extensions():
        reqs: list[str] = _hook("get_requires_for_build_wheel")(config_settings)
    return reqs + _compiled_requirements()


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    with _without_extensions():
        reqs: list[str] = _hook("get_requires_for_build_editable")(config_settings)
    return reqs + _compiled_requirements()


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    with _without_extensions():
        return str(_hook("prepare_metadata_for_build_wheel")(metadata_directory, config_settings))


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Any = None
) -> str:
    with _without_extensions():
        hook = _hook("prepare_metadata_for_build_editable")
        return str(hook(metadata_directory, config_settings))
