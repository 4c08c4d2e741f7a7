"""An app file without ``root_agent``, for the CLI's error tests."""

GREETING = "nothing to run here"
