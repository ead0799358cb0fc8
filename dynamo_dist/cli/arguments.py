"""Argument types shared by the commands: a bad value is an argparse error
(usage and one line naming the argument), found before any work starts."""

from __future__ import annotations

import argparse
import os


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def existing_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def file_with_markers(*markers: str, home: str = ""):
    """An existing file holding ``<!-- M:begin -->`` ... ``<!-- M:end -->``
    for each marker M: the generated blocks a command rewrites (``home``:
    the file that holds them in this repository, named in the error)."""

    def check(text: str) -> str:
        existing_file(text)
        with open(text) as f:
            content = f.read()
        missing = [m for m in markers if f"<!-- {m}:begin -->" not in content or f"<!-- {m}:end -->" not in content]
        if missing:
            where = f" (they live in {home})" if home else ""
            raise argparse.ArgumentTypeError(
                f"{text} has no <!-- {missing[0]}:begin --> ... <!-- {missing[0]}:end --> block to rewrite{where}")
        return text

    return check
