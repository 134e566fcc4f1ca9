"""A heavy library a test file uses, imported when a test first touches it, not when the
file is collected.

Why: each xdist worker collects every test file, so a file that imports torch at its top
(seconds, with transformers) costs that on both workers, even on the one that never runs
it. ``torch = lazy_module("torch")`` keeps the file's code as it was (``torch.tensor``...)
and moves the import into the first test that needs it. Without the library that test is
skipped, with pytest.importorskip's reason, as a top-level importorskip skipped the file.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it (or skips the
    test that asked), every later read goes to the module itself."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest, copy or inspect probing the stand-in: no import for them
            raise AttributeError(attr)
        if self._module is None:
            self._module = pytest.importorskip(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{'' if self._module is None else ', imported'}>"


def lazy_module(name: str) -> Any:
    """The module ``name``, imported on first use (typed Any: it reads as the module)."""
    return LazyModule(name)
