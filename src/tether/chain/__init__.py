"""Durable chains: a graph of nodes over a dict state."""

from .graph import Chain, Edge

__all__ = ["Chain", "Edge"]
