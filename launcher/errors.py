"""Errors that end a command with exit code 2 and one line per problem."""

from __future__ import annotations


class SpecError(Exception):
    """Bad user input. `field` names what is wrong; the message says how to fix it."""

    exit_code = 2

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def quoted_short(text: str) -> str:
    """A value as an error line quotes it: repr'd, and a pasted blob cut to its start and its
    length, so the line stays one short line (5,000 digits are not shown again)."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


class SpecErrors(Exception):
    """Several SpecErrors found in one pass (validate reports all of them)."""

    exit_code = 2

    def __init__(self, errors: list[SpecError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


class SlurmError(Exception):
    """A Slurm command failed; the message carries the command and its stderr."""

    exit_code = 1
