"""What the sub-commands share. Each package's `cli` module offers
`register(sub)`: it adds its parser, whose `func(args, environ, out)` returns
the exit status (ncclsim.cli calls it). A command that needs the GPU models
reads them itself (platform.models.load_models)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable, TextIO


def add_command(sub: Any, name: str, summary: str, description: str,
                arguments: Callable[[argparse.ArgumentParser], None], run: Callable[..., int]) -> None:
    """`ncclsim NAME`: its parser (help line, description, arguments) and what runs it."""
    p = sub.add_parser(name, help=summary, description=description)
    arguments(p)
    p.set_defaults(func=run)


def emit_json(out: TextIO, doc: dict[str, Any], schema_version: int) -> None:
    json.dump({"schema_version": schema_version, **doc}, out, indent=2)
    out.write("\n")


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in lo..hi."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value
    return parse
