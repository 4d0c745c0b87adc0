"""The one error type the command line prints without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad config, engine that will not start); printed without a traceback."""
