"""Agents: an LLM tool loop, swarms of agents that hand off, and supervisors of workers."""
