"""The engine every runner shares (internal: not public API; docs/design.md §11).

The chain executor (:mod:`tether.chain`), the agent executors (:mod:`tether.agent`) and the
integrations (:mod:`tether.integrations`) drive runs with these modules, each one idea:

- :mod:`.rows`: every row the engine writes, and the rules about rows (what resume steps over,
  what fork may branch from);
- :mod:`.nesting`: runners inside runners: outer frames, re-entry level by level, the nested
  pause, the check that the code still has a row's step;
- :mod:`.claim`: the claim of a pending interrupt and its heartbeat;
- :mod:`.lease`: the run lease a drive holds, its heartbeat thread, the leased verbs;
- :mod:`.fork`: what every fork does before it branches (the branch's lease, the source row);
- :mod:`.owners`: owner ids and whether an owner's process is gone;
- :mod:`.sync`: the sync twins of the async verbs.

Imports go one way: ``owners`` <- ``lease`` <- ``claim``, ``rows`` <- ``nesting``, ``lease``
and ``rows`` <- ``fork``; none of them imports a runner (``Chain``, ``Agent``), so the runners
can import all of them.
"""
