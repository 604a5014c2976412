"""Entry point of swarmnode/lab/bench_ingest.py (--help says what the command does)."""

from swarmnode.lab.bench_ingest import main

if __name__ == "__main__":
    main()
