"""Entry point of swarmnode/lab/bench_flood.py (--help says what the command does)."""

from swarmnode.lab.bench_flood import main

if __name__ == "__main__":
    main()
