"""relaykit benchmarks: ``python -m bench`` (``make bench``) writes tables to bench/results/."""
