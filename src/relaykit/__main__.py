"""``python -m relaykit``: the ``relaykit`` command (the same as ``python -m relaykit.cli``)."""

from relaykit.cli import main

main()
