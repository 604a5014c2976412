"""The learner: a node's model and what it does with it, alone.

Modules: ``groups`` (``RolloutGroup``, the unit everything passes around), ``tasks``
(reasoning-gym items by reference), ``rewards`` (pure scorers), ``model`` (loading,
LoRA), ``generate`` (G completions on one shared prefix), ``grpo`` (the policy
update), ``trainer`` (rollout + update for one node), ``curriculum``, ``collapse``,
``checkpoint``, ``evaluate`` (held-out), ``metrics`` (the per-round record),
``interrupt`` (stop points in a pass), ``memory`` (giving freed memory back),
``progress`` (progress bars where a person waits).

Invariant: nothing here imports ``share``, ``p2p`` or ``ops``; a learner runs alone.
"""
