"""The operator's side: what a person sees of a running node and how they reach it.

Modules: ``status`` (each daemon role's typed status: the daemon builds it, every
view below renders it), ``control`` (the status socket and its client), ``report``
(``swarmnode status`` / ``peers`` text), ``monitor`` (``/metrics``, ``/api/state``
and the dashboard in ``dashboard/``), ``monitor_view`` (the status as Prometheus
metrics), ``keys`` (the ``keygen`` / ``id`` commands), ``nodedir`` (a data
directory as ``eval`` / ``export`` / ``ask`` read it: resolved config, verified
checkpoint),
``evalreport`` (``eval``'s text, the paired difference with the base, saved
results), ``export`` (a checkpoint as a Hugging Face model folder), ``model_card``
(its ``README.md``), ``ask`` (one question to the trained model, streamed).

Invariant: reads the daemons through what they publish (their ``status`` callable,
handed over at start), never a daemon object; nothing in ``learn``, ``share`` or
``p2p`` imports this package, and nothing here imports ``node`` or ``bootstrap``.
"""
