"""Integrations that make other agent frameworks' agents tether runners.

Each lives in its own subpackage and imports its framework only when that subpackage is
imported, so ``import tether`` never needs them (install the matching extra).
"""
