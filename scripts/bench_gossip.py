"""Entry point of swarmnode/lab/bench_gossip.py (--help says what the command does)."""

from swarmnode.lab.bench_gossip import main

if __name__ == "__main__":
    main()
