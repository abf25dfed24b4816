"""Errors the CLI reports as one line on stderr, each with the exit code it ends with."""

from __future__ import annotations

from typing import Any


class CliError(Exception):
    """A failure the user can act on: printed as ``jetraft: error: <message>``, no traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ApiError(CliError):
    """A JetStream API error reply: nats-server's description and err_code, as
    ``<description> (<err_code>)``."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} ({err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description

    @classmethod
    def from_reply(cls, error: dict[str, Any]) -> ApiError:
        return cls(
            int(error.get("code", 0) or 0),
            int(error.get("err_code", 0) or 0),
            str(error.get("description", "unknown error")),
        )

    def with_context(self, context: str) -> ApiError:
        """The same error, its message prefixed with what was being done."""
        err = ApiError(self.code, self.err_code, self.description)
        err.message = f"{context}: {self.message}"
        return err


# err_codes the CLI looks at.
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
NO_MESSAGE_FOUND = 10037
