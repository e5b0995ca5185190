"""Names a package gives on first use (PEP 562's module `__getattr__`): the parts of core_model
that need torch are imported only when asked for, so a command that reads model folders' configs
or runs' records (`python -m workbench versions`, `runs`) never pays torch's import (~3.4 s on a
2-core AVX2 laptop; `test_listing_versions_and_runs_does_not_import_torch`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def on_first_use(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A `__getattr__` for `package` that imports each name of `homes` from its module (name →
    module) when first asked for; any other name is an AttributeError, as without it."""

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
