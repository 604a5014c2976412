"""Entry point of swarmnode/lab/bench_round.py (--help says what the command does)."""

from swarmnode.lab.bench_round import main

if __name__ == "__main__":
    raise SystemExit(main())
