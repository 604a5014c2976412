"""Entry point of swarmnode/lab/bench_scale.py (--help says what the command does)."""

from swarmnode.lab.bench_scale import main

if __name__ == "__main__":
    main()
