"""The operator's side: what a person sees of a running node and how they reach it.

Modules: ``control`` (the status socket and its client), ``report`` (``swarmnode
status`` / ``peers`` text), ``monitor`` (``/metrics``, ``/api/state`` and the
dashboard in ``dashboard/``), ``monitor_view`` (a daemon's view for the monitor),
``keys`` (the ``keygen`` / ``id`` commands).

Invariant: reads the daemons through what they publish; nothing in ``learn``,
``share`` or ``p2p`` imports this package.
"""
