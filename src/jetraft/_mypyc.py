"""``mypyc_attr`` for the modules the optional compiled build compiles (see setup.py).

mypyc reads the decorator when it compiles a class (``allow_interpreted_subclasses=True``: a
class that plain Python code may subclass, such as a store the tests extend) and does not call
it at run time. The pure-Python build must not need mypy_extensions, which comes with mypy,
a build requirement of the compiled build only: without it the decorator does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # pure Python without mypy installed: nothing to tell mypyc

        def mypyc_attr(*_attrs: Any, **_kwattrs: Any) -> Any:
            return lambda cls: cls


__all__ = ["mypyc_attr"]
