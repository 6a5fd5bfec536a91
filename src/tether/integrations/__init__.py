"""Integrations of tether with other agent frameworks. Each is an optional extra, imported only
when its own module is (``import tether`` imports none of them)."""
