"""The lab: benchmarks, the local demo swarm and the experiment harness.

Everything here measures or exercises swarmnode from outside, as an operator or a
researcher would: real ``swarmnode start`` processes, real libp2p hosts, the
project's configs. Nothing in the daemon imports this package. Each command module
has a ``main()``; ``scripts/<name>.py`` is its thin entry point, so
``python scripts/<name>.py --help`` keeps working and says what the module does.

Benchmarks
    bench_round       one swarmnode round vs one TRL GRPOTrainer step, same work
    bench_swarm       a node's round time in a 4-node swarm vs alone; bytes per round
    bench_flood       a real node under 1 flooding peer or 5 Sybils (phases, ratios)
    bench_scale       a real node receiving the rounds of N honest peers
    bench_gossip      N transports on loopback: latency, delivery, CPU per message
    bench_ingest      CPU per peer message in ingestion (decode, offer, compose)
    fuzz_wire         hostile frames, envelopes and payloads against a real host
    memory_profile    resident memory after each stage of one node's work
    soak              a node (or a few) for N rounds: memory and round time a round
    probe_tasks       the base model on candidate tasks: is there signal to learn?

Local swarms and the experiment harness
    localswarm        node processes on loopback (configs, ports, bootstrap peer)
    demo              a small demo swarm of real nodes, with a summary
    learning_curve    one node alone: does its reward rise?
    sapo_experiment   the SAPO sweep: configurations x seeds, paired aggregation
    sapo_stats        paired and swarm-level differences, permutation p (pure functions)
    sapo_tables       results.md's sections with swarms as the unit, equal effort, commits
    sapo_raw          the committed form of experiment runs, and back
    sapo_interim      a paired comparison of two runs still going
    update_size       gradient norm and tokens trained by thirds, from raw metrics

Helpers
    plotting          headless matplotlib figures in the house look
    tiny              tiny random Llama/Qwen2 models with real tokenizers
    config_reference  the config reference table, generated from the config models

Invariants: importing ``swarmnode.lab`` or any of its modules loads no torch,
transformers or matplotlib (they are imported inside the functions that use them),
and runs nothing. ``REPO`` is the checkout the package sits in: the commands read
its ``configs/`` and write under its ``runs/``, and start nodes with it as their
working directory.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
