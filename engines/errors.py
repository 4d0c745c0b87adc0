"""The error every part of ``engines`` raises for what the user must fix or know (an engine that
cannot be started, reached or used), apart from the modules that raise it so none imports another
only for it."""


class EngineError(RuntimeError):
    """An engine that cannot be started, reached or used; the message is for the user."""
