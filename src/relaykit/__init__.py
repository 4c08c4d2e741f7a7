"""relaykit"""
