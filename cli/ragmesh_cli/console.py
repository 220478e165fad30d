"""The CLI's two consoles: `err` (stderr: progress, tables for people, errors) and `out` (stdout: results a
script reads). Markup is off on both, so names, messages and result texts print as they are: a "[...]" in a
document is text, never a style."""

from __future__ import annotations

from rich.console import Console

err = Console(stderr=True, markup=False)
out = Console(markup=False)
