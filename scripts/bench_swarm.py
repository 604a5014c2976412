"""Entry point of swarmnode/lab/bench_swarm.py (--help says what the command does)."""

from swarmnode.lab.bench_swarm import main

if __name__ == "__main__":
    main()
