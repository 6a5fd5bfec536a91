"""Tests of tether's own Agent (a package, so pytest does not put this folder on sys.path,
where its ``agents.py`` would shadow the OpenAI Agents SDK's ``agents``)."""
